//! Config files: TOML with `[sources.NAME]`, `[filters.NAME]`, `[outputs.NAME]`.

mod diagnostic;
mod env;
mod options;
mod parse_error;
mod secret;

pub use diagnostic::{Diagnostic, Location, SourceText, did_you_mean, suggestion};
pub use env::Secrets;
pub(crate) use env::substitute_tree as env_substitute;
pub use options::{MAX_DURATION_MS, MAX_QUEUE, Options, out_of_range};
pub use secret::Secret;
