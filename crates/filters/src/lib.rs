//! patchbay's built-in filters (in progress).
