//! The escapement adapter (in progress).
