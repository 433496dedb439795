//! Phase 3, names: every component's name is unique across files and sections, and
//! usable in `inputs`.

use std::collections::HashMap;

use crate::config::{Diagnostic, SourceText};

use super::parse::Decl;

/// Reports invalid names and names declared twice.
pub(super) fn check(decls: &[Decl<'_>], files: &[SourceText], errors: &mut Vec<Diagnostic>) {
    let mut first_seen: HashMap<&str, String> = HashMap::new();
    for d in decls {
        let file = &files[d.file];
        if !valid(&d.name) {
            errors.push(file.error(
                d.name_span.clone(),
                format!(
                    "invalid name `{}`: use letters, digits, `_`, `-` or `:` (`.` and `*` have a meaning in inputs)",
                    d.name
                ),
            ));
        }
        match first_seen.get(d.name.as_str()) {
            Some(prev) => errors.push(file.error(
                d.name_span.clone(),
                format!("`{}` is declared twice (first at {prev})", d.name),
            )),
            None => {
                first_seen.insert(&d.name, file.location(d.name_span.start).to_string());
            }
        }
    }
}

/// Whether a name can be written in `inputs`: `.` and `*` would be read as a port or a
/// prefix.
fn valid(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == ':')
}
