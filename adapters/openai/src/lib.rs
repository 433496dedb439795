//! The openai adapter (in progress).
