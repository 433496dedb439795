//! Config files: TOML with `[sources.NAME]`, `[filters.NAME]`, `[outputs.NAME]`.

mod diagnostic;
mod env;
mod options;
mod secret;

pub use diagnostic::{Diagnostic, Location, SourceText, did_you_mean, suggestion};
pub use env::Secrets;
pub(crate) use env::substitute_tree as env_substitute;
pub use options::Options;
pub use secret::Secret;
