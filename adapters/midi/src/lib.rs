//! The midi adapter (in progress).
