//! The openclaw adapter (in progress).
