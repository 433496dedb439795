//! The sse adapter (in progress).
