//! The codelia adapter (in progress).
