//! The palyra adapter (in progress).
