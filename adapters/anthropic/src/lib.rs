//! The anthropic adapter (in progress).
