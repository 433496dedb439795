//! The jte adapter (in progress).
