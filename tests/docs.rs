//! The docs are checked like code: the README, `docs/**/*.md`, ARCHITECTURE.md,
//! BENCHMARKS.md and RELIABILITY.md.
//!
//! - **Links.** Every relative link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`,
//!   and `[label]: path` definitions) resolves: the file or folder exists, and an anchor
//!   into a Markdown file names one of its headings by GitHub's rules (lowercase; spaces to
//!   `-`; punctuation dropped but `-` and `_`; a repeated heading gets `-1`, `-2`, …).
//!   Links inside code (fenced blocks, `code spans`) are not links. External links
//!   (`http:`, `https:`, `mailto:`) are not fetched: the tests use no network.
//! - **Example configs.** Every ```` ```toml ```` block in README.md and `docs/` is a whole
//!   config that `patchbay validate` accepts (and, when it has `[[tests]]`, whose tests
//!   `patchbay test` passes). Each `${NAME}` it uses is set to a placeholder for the run.
//!   A block that is only part of a config (an option line, one section that reads
//!   inputs declared elsewhere) is marked by an HTML comment on the line before its fence,
//!   which GitHub does not show:
//!
//!   ````markdown
//!   <!-- fragment: why, if it helps -->
//!   ```toml
//!   when = { type = "error" }
//!   ```
//!   ````
//!
//!   Prefer a whole config (add the source or output the block reads from) where it
//!   costs a few lines.
//! - **The component reference.** `docs/reference/components.md` is exactly what
//!   `patchbay components --markdown` prints for this build; when a component's options
//!   or their doc comments change, regenerate it with
//!   `cargo run --quiet -- components --markdown > docs/reference/components.md`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use patchbay_testkit::scratch::ScratchDir;

/// The marker that makes the `toml` block after it a fragment, skipped by the validation.
const FRAGMENT_MARKER: &str = "<!-- fragment";

/// The command that regenerates the component reference, printed when it is stale.
const REGENERATE: &str =
    "cargo run --quiet -- components --markdown > docs/reference/components.md";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the binary from the repository's root, with `env` set.
fn patchbay(args: &[&str], env: &[(String, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(args)
        .current_dir(root())
        .env("PATCHBAY_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("patchbay runs")
}

/// The Markdown files whose links are checked, relative to the root: README.md,
/// ARCHITECTURE.md, BENCHMARKS.md, RELIABILITY.md and every `.md` under `docs/`.
fn checked_docs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "RELIABILITY.md",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    files.extend(markdown_under(Path::new("docs")));
    files
}

/// The files whose `toml` blocks are validated: README.md and `docs/**/*.md`.
fn docs_with_configs() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    files.extend(markdown_under(Path::new("docs")));
    files
}

/// Every `.md` file under `dir` (relative to the root), sorted.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(root().join(&dir))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("directory entry");
            let path = dir.join(entry.file_name());
            if entry.file_type().expect("file type").is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn read(relative: &Path) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("{}: {e}", relative.display()))
}

// ---------------------------------------------------------------------------------------
// Reading Markdown: fences, code spans, links, headings.

/// A fenced code block: its info string (`toml`), the line of its opening fence (1-based),
/// the line before the fence that is not blank, and its text.
#[derive(Debug)]
struct Block {
    info: String,
    line: usize,
    before: String,
    text: String,
}

/// The fenced code blocks of a Markdown text, and the text with every line inside a
/// fence (fences included) blanked, so that line numbers stay right.
fn split_fences(text: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::with_capacity(text.len());
    // The open fence: its character, its length, and the block being collected.
    let mut open: Option<(char, usize, Block)> = None;
    let mut last_prose_line = String::new();
    for (i, line) in text.lines().enumerate() {
        let was_inside = open.is_some();
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let fence = (indent <= 3)
            .then(|| {
                let c = trimmed.chars().next()?;
                if c != '`' && c != '~' {
                    return None;
                }
                let n = trimmed.chars().take_while(|&x| x == c).count();
                (n >= 3).then_some((c, n))
            })
            .flatten();
        match (&mut open, fence) {
            (None, Some((c, n))) => {
                let info = trimmed[n..].trim().to_owned();
                // A backtick fence's info string has no backtick: otherwise it is a code
                // span at the start of a line.
                if c == '`' && info.contains('`') {
                    prose.push_str(line);
                } else {
                    let block = Block {
                        info,
                        line: i + 1,
                        before: last_prose_line.clone(),
                        text: String::new(),
                    };
                    open = Some((c, n, block));
                }
            }
            (Some((c, n, _)), Some((close_c, close_n)))
                if close_c == *c && close_n >= *n && trimmed[close_n..].trim().is_empty() =>
            {
                let (_, _, block) = open.take().expect("open fence");
                blocks.push(block);
            }
            (Some((_, _, block)), _) => block.text.push_str(&format!("{line}\n")),
            (None, None) => prose.push_str(line),
        }
        // The line a block's marker is looked for on: the last one outside a block (a
        // closing fence counts, so that a marker does not reach past a block).
        if !line.trim().is_empty() && (!was_inside || open.is_none()) {
            last_prose_line = line.to_owned();
        }
        prose.push('\n');
    }
    if let Some((_, _, block)) = open {
        // An unclosed fence runs to the end of the document, as CommonMark reads it.
        blocks.push(block);
    }
    (blocks, prose)
}

/// `text` with the content of every code span replaced by spaces (newlines kept), so
/// that what looks like a link inside code is not read as one.
fn blank_code_spans(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        // The closing run: the same number of backticks, no more, no fewer.
        let mut j = i + run;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let n = bytes[j..].iter().take_while(|&&b| b == b'`').count();
                if n == run {
                    close = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for b in &mut out[i..j + run] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
                i = j + run;
            }
            // No closing run: the backticks are literal text.
            None => i += run,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A link found in a document: its target as written and its line.
#[derive(Debug, PartialEq)]
struct Link {
    target: String,
    line: usize,
}

/// The links of a document's prose (code already blanked): inline `](target)` and
/// reference definitions `[label]: target`.
fn links(prose: &str) -> Vec<Link> {
    let mut out = Vec::new();
    let line_of = |offset: usize| prose[..offset].matches('\n').count() + 1;
    let mut from = 0;
    while let Some(at) = prose[from..].find("](") {
        let start = from + at + 2;
        let rest = &prose[start..];
        let rest = rest.trim_start();
        let target = if let Some(angled) = rest.strip_prefix('<') {
            angled.split('>').next().unwrap_or("")
        } else {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == ')')
                .unwrap_or(rest.len());
            &rest[..end]
        };
        out.push(Link {
            target: target.to_owned(),
            line: line_of(start),
        });
        from = start;
    }
    let mut offset = 0;
    for line in prose.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(close) = trimmed.find("]:")
            && !trimmed[1..close].contains(']')
        {
            let target = trimmed[close + 2..].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                out.push(Link {
                    target: target.to_owned(),
                    line: line_of(offset),
                });
            }
        }
        offset += line.len();
    }
    out
}

/// GitHub's anchor for a heading's text: its rendered text (links by their text, code
/// spans by their content, HTML tags dropped), lowercased, with every character but
/// letters, digits, spaces, `-` and `_` dropped, and spaces made `-`.
fn slug(heading: &str) -> String {
    let mut rendered = String::new();
    let mut rest = heading;
    // Links: keep the text, drop the target.
    while let Some(open) = rest.find('[') {
        rendered.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(mid) => match after[mid + 2..].find(')') {
                Some(end) => {
                    rendered.push_str(&after[..mid]);
                    rest = &after[mid + 2 + end + 1..];
                }
                None => {
                    rendered.push('[');
                    rest = after;
                }
            },
            None => {
                rendered.push('[');
                rest = after;
            }
        }
    }
    rendered.push_str(rest);
    // HTML tags.
    let mut text = String::new();
    let mut in_tag = false;
    for c in rendered.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown document offers: its ATX headings' slugs (a repeated one with
/// `-1`, `-2`, … as GitHub numbers them) and the `id`/`name` of its HTML anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split_fences(text);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in prose.lines() {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            continue;
        }
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes)
            && trimmed[hashes..].starts_with([' ', '\t'])
            && !trimmed[hashes..].trim().is_empty()
        {
            // A closing sequence of `#`s is not part of the heading.
            let content = trimmed[hashes..].trim();
            let content = content.trim_end_matches('#').trim_end();
            let base = slug(content);
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        // `<a id="x">` or `<a name="x">`.
        let mut rest = line;
        while let Some(at) = rest.find("<a ") {
            let tag = &rest[at..];
            let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
            for key in [" id=\"", " name=\""] {
                if let Some(k) = tag.find(key) {
                    let value = &tag[k + key.len()..];
                    out.insert(value[..value.find('"').unwrap_or(value.len())].to_owned());
                }
            }
            rest = &rest[at + tag.len()..];
        }
    }
    out
}

/// What is wrong with each relative link of `doc` (a path relative to the root), read
/// from `text`; `read_target` reads another Markdown file for its anchors.
fn broken_links(
    doc: &Path,
    text: &str,
    exists: &dyn Fn(&Path) -> bool,
    read_target: &dyn Fn(&Path) -> Option<String>,
) -> Vec<String> {
    let (_, prose) = split_fences(text);
    let prose = blank_code_spans(&prose);
    let mut problems = Vec::new();
    let dir = doc.parent().unwrap_or(Path::new(""));
    for link in links(&prose) {
        let target = link.target.as_str();
        let at = format!("{}:{}", doc.display(), link.line);
        let lower = target.to_ascii_lowercase();
        if target.is_empty() {
            problems.push(format!("{at}: an empty link"));
            continue;
        }
        if lower.starts_with("http://")
            || lower.starts_with("https://")
            || lower.starts_with("mailto:")
        {
            continue;
        }
        if target.contains("://") {
            problems.push(format!(
                "{at}: `{target}`: a scheme the docs do not link to"
            ));
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target, None),
        };
        let path = path.split('?').next().unwrap_or("");
        if path.starts_with('/') {
            problems.push(format!(
                "{at}: `{target}`: an absolute path (write it relative to {})",
                doc.display()
            ));
            continue;
        }
        if path.is_empty() {
            // An anchor into this same document.
            let anchor = anchor.unwrap_or("");
            if !anchors(text).contains(anchor) {
                problems.push(format!("{at}: `{target}`: no heading `#{anchor}` here"));
            }
            continue;
        }
        let resolved = normalize(&dir.join(path));
        if !exists(&resolved) {
            problems.push(format!(
                "{at}: `{target}`: {} does not exist",
                resolved.display()
            ));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if resolved.extension().is_some_and(|e| e == "md") {
            let Some(target_text) = read_target(&resolved) else {
                problems.push(format!(
                    "{at}: `{target}`: cannot read {}",
                    resolved.display()
                ));
                continue;
            };
            let offered = anchors(&target_text);
            if !offered.contains(anchor) {
                let near: Vec<&String> = offered
                    .iter()
                    .filter(|a| {
                        let stem = anchor.split('-').next().unwrap_or(anchor);
                        a.contains(stem)
                    })
                    .take(5)
                    .collect();
                problems.push(format!(
                    "{at}: `{target}`: {} has no heading `#{anchor}`{}",
                    resolved.display(),
                    if near.is_empty() {
                        String::new()
                    } else {
                        format!(" (it has {near:?})")
                    }
                ));
            }
        } else if !is_line_anchor(anchor) {
            problems.push(format!(
                "{at}: `{target}`: an anchor into a file that is not Markdown (only `#L12` or `#L12-L20`)"
            ));
        }
    }
    problems
}

/// `L12` or `L12-L20`: GitHub's anchors to lines of a file.
fn is_line_anchor(anchor: &str) -> bool {
    let line = |s: &str| {
        s.strip_prefix('L')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    match anchor.split_once('-') {
        Some((a, b)) => line(a) && line(b),
        None => line(anchor),
    }
}

/// A relative path with `.` and `..` worked out (`docs/../README.md` is `README.md`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The `toml` blocks of a document that are whole configs: every one but those marked
/// as fragments.
fn config_blocks(text: &str) -> Vec<Block> {
    split_fences(text)
        .0
        .into_iter()
        .filter(|b| b.info.split_whitespace().next() == Some("toml"))
        .filter(|b| !b.before.trim_start().starts_with(FRAGMENT_MARKER))
        .collect()
}

/// The `${NAME}` references of a config, to give them placeholder values.
/// `$$` is a literal `$`, as the config loader reads it.
fn env_references(config: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = config;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        if let Some(after) = after.strip_prefix('$') {
            rest = after;
        } else if let Some(after) = after.strip_prefix('{') {
            let end = after.find('}').unwrap_or(after.len());
            let name = &after[..end];
            if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                out.insert(name.to_owned());
            }
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out
}

/// What is wrong with the whole-config `toml` blocks of `doc`: each one is written to
/// `dir`, validated, and tested when it has `[[tests]]`. Also returns how many were
/// checked.
fn invalid_configs(doc: &Path, text: &str, dir: &ScratchDir) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let blocks = config_blocks(text);
    for block in &blocks {
        let name = format!(
            "{}-L{}.toml",
            doc.display().to_string().replace(['/', '\\'], "_"),
            block.line
        );
        let path = dir.join(&name);
        std::fs::write(&path, &block.text).expect("write the block");
        let path = path.display().to_string();
        let env: Vec<(String, String)> = env_references(&block.text)
            .into_iter()
            .map(|name| {
                let value = format!("placeholder-{}", name.to_lowercase());
                (name, value)
            })
            .collect();
        let at = format!("{}:{}", doc.display(), block.line);
        let out = patchbay(&["validate", &path], &env);
        if !out.status.success() {
            problems.push(format!(
                "{at}: this ```toml block is not a valid config (mark it `{FRAGMENT_MARKER} -->` on the line before the fence if it is part of one):\n{}",
                indent(&String::from_utf8_lossy(&out.stderr))
            ));
            continue;
        }
        if block.text.contains("[[tests]]") {
            let out = patchbay(&["test", &path], &env);
            if !out.status.success() {
                problems.push(format!(
                    "{at}: the [[tests]] of this ```toml block fail:\n{}{}",
                    indent(&String::from_utf8_lossy(&out.stdout)),
                    indent(&String::from_utf8_lossy(&out.stderr))
                ));
            }
        }
    }
    (problems, blocks.len())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

// ---------------------------------------------------------------------------------------
// The checks on the repository's docs.

#[test]
fn every_relative_link_resolves_to_a_file_and_a_heading() {
    let docs = checked_docs();
    assert!(docs.len() >= 10, "the docs are found: {docs:?}");
    let exists = |p: &Path| root().join(p).exists();
    let read_target = |p: &Path| std::fs::read_to_string(root().join(p)).ok();
    let mut problems = Vec::new();
    let mut count = 0;
    for doc in &docs {
        let text = read(doc);
        let (_, prose) = split_fences(&text);
        count += links(&blank_code_spans(&prose)).len();
        problems.extend(broken_links(doc, &text, &exists, &read_target));
    }
    assert!(count >= 100, "the links are found: only {count}");
    assert!(
        problems.is_empty(),
        "{} broken link(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_docs_page_is_linked_from_the_index_and_the_readme() {
    let pages: Vec<PathBuf> = markdown_under(Path::new("docs"))
        .into_iter()
        .filter(|p| p != Path::new("docs/README.md"))
        .collect();
    assert!(pages.len() >= 10, "the pages are found: {pages:?}");
    for index in [Path::new("docs/README.md"), Path::new("README.md")] {
        let (_, prose) = split_fences(&read(index));
        let dir = index.parent().unwrap_or(Path::new(""));
        let linked: BTreeSet<PathBuf> = links(&blank_code_spans(&prose))
            .into_iter()
            .map(|l| normalize(&dir.join(l.target.split('#').next().unwrap_or(""))))
            .collect();
        let missing: Vec<&PathBuf> = pages.iter().filter(|p| !linked.contains(*p)).collect();
        assert!(
            missing.is_empty(),
            "{} does not link to {missing:?}: a newcomer finds a page through it",
            index.display()
        );
    }
}

#[test]
fn every_whole_config_in_the_docs_validates() {
    let dir = ScratchDir::new("docs-configs");
    let mut problems = Vec::new();
    let mut count = 0;
    for doc in docs_with_configs() {
        let (p, n) = invalid_configs(&doc, &read(&doc), &dir);
        problems.extend(p);
        count += n;
    }
    assert!(count >= 20, "the configs are found: only {count}");
    assert!(
        problems.is_empty(),
        "{} example config(s) fail:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_component_reference_is_what_the_build_prints() {
    let out = patchbay(&["components", "--markdown"], &[]);
    assert!(
        out.status.success(),
        "components --markdown: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = String::from_utf8(out.stdout).expect("UTF-8");
    let path = Path::new("docs/reference/components.md");
    let checked_in = std::fs::read_to_string(root().join(path)).unwrap_or_default();
    if built != checked_in {
        let (line, want, got) = built
            .lines()
            .zip(checked_in.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| (i + 1, a.to_owned(), b.to_owned()))
            .unwrap_or_else(|| {
                let n = built.lines().count().min(checked_in.lines().count());
                (n + 1, "(the end differs)".into(), String::new())
            });
        panic!(
            "{} is stale: it differs from `patchbay components --markdown` from line {line}:\n  \
             the build: {want}\n  the file:  {got}\nRegenerate it:\n  {REGENERATE}",
            path.display()
        );
    }
    // The reference names every type the build lists.
    let list = patchbay(&["components", "--json"], &[]);
    let types: serde_json::Value = serde_json::from_slice(&list.stdout).expect("JSON list");
    for t in types.as_array().expect("an array") {
        let name = t["type"].as_str().expect("type");
        assert!(
            built.contains(&format!("### `{name}` (")),
            "the reference has no section for `{name}`"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The checker itself: each check catches what it is for.

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug("NATS: signals to other machines"),
        "nats-signals-to-other-machines"
    );
    assert_eq!(slug("OpenTelemetry: `otlp`"), "opentelemetry-otlp");
    assert_eq!(
        slug("`claude_code` (source, output)"),
        "claude_code-source-output"
    );
    assert_eq!(
        slug("One gate — for every agent"),
        "one-gate--for-every-agent"
    );
    assert_eq!(
        slug("See [the sidecar](sidecar.md) here"),
        "see-the-sidecar-here"
    );
    assert_eq!(slug("Über <em>alles</em>"), "über-alles");
    let text = "# A\n## B\n```\n# not a heading\n```\n## B\n### B ###\n<a id=\"x\"></a>\n";
    let want: BTreeSet<String> = ["a", "b", "b-1", "b-2", "x"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(anchors(text), want);
}

#[test]
fn links_in_code_are_not_links_and_others_are_found() {
    let text = "See [a](a.md) and `[b](b.md)` and ``[c](`c.md`)``.\n\n```md\n[d](d.md)\n```\n\
                [e]: e.md \"title\"\n[f](<f g.md>) ![img](i.png)\n";
    let (_, prose) = split_fences(text);
    let got: Vec<(String, usize)> = links(&blank_code_spans(&prose))
        .into_iter()
        .map(|l| (l.target, l.line))
        .collect();
    let want = [("a.md", 1), ("f g.md", 7), ("i.png", 7), ("e.md", 6)];
    let want: Vec<(String, usize)> = want.iter().map(|(t, l)| (t.to_string(), *l)).collect();
    assert_eq!(got, want);
}

#[test]
fn broken_links_and_anchors_are_reported() {
    let files: HashMap<PathBuf, &str> = [
        (PathBuf::from("docs/a.md"), "# Page A\n## Second part\n"),
        (PathBuf::from("README.md"), "# Top\n"),
        (PathBuf::from("pipelines/x.toml"), ""),
    ]
    .into_iter()
    .collect();
    let exists = |p: &Path| files.contains_key(p) || p == Path::new("pipelines");
    let read_target = |p: &Path| files.get(p).map(|t| t.to_string());
    let doc = Path::new("docs/b.md");
    let text = "# B\n[ok](a.md#second-part) [ok](../README.md) [ok](#b) [ok](../pipelines/)\n\
                [ok](../pipelines/x.toml#L3-L5) [ok](https://example.com/nowhere)\n\
                [bad](a.md#third-part) [bad](missing.md) [bad](#nowhere)\n\
                [bad](../pipelines/x.toml#top) [bad](/etc/passwd)\n";
    let problems = broken_links(doc, text, &exists, &read_target);
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(problems[0].contains("docs/b.md:4") && problems[0].contains("#third-part"));
    assert!(problems[1].contains("docs/missing.md does not exist"));
    assert!(problems[2].contains("#nowhere"));
    assert!(problems[3].contains("not Markdown"));
    assert!(problems[4].contains("absolute path"));
}

#[test]
fn a_bad_config_is_reported_and_a_marked_fragment_is_skipped() {
    let dir = ScratchDir::new("docs-self-check");
    // 1: whole, and valid only with its `${NAME}` set; 2: reads an input nobody declares;
    // 3: a marked fragment; 4: whole and valid, but its test fails; 5: after a fragment's
    // block, not marked itself, and invalid.
    let text = "# Example\n\n```toml\n[sources.a]\ntype = \"stdin\"\n\n[outputs.b]\ntype = \"file\"\n\
                inputs = [\"a\"]\npath = \"${DOCS_SELF_CHECK_PATH}\"\n```\n\n\
                ```toml\n[outputs.b]\ntype = \"stdout\"\ninputs = [\"nowhere\"]\n```\n\n\
                <!-- fragment: one line -->\n```toml\nwhen = { type = \"error\" }\n```\n\n\
                ```toml\n[sources.a]\ntype = \"stdin\"\n\n[filters.f]\ntype = \"when\"\ninputs = [\"a\"]\n\
                when = { type = \"x\" }\n\n[outputs.b]\ntype = \"stdout\"\ninputs = [\"f\"]\n\n\
                [[tests]]\nname = \"wrong\"\n\
                inputs = [{ insert_at = \"a\", signal = { type = \"x\", timestamp = 0 } }]\n\
                outputs = [{ extract_from = \"f\", expect = [{ type = \"y\" }] }]\n```\n\n\
                <!-- fragment -->\n```toml\nx = 1\n```\n```toml\nnot toml at all\n```\n";
    let (problems, checked) = invalid_configs(Path::new("docs/example.md"), text, &dir);
    assert_eq!(checked, 4, "the fragment is skipped, the others checked");
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("docs/example.md:13") && problems[0].contains("nowhere"));
    assert!(problems[1].contains("[[tests]]"), "{}", problems[1]);
    assert!(
        problems[2].contains("docs/example.md:47"),
        "{}",
        problems[2]
    );
    assert_eq!(
        env_references(
            "a = \"${A_1}\" b = \"$${NOT}\" c = \"${}\" d = \"$$$${B}\" e = \"$${C}${D}\""
        ),
        ["A_1", "D"].iter().map(|s| s.to_string()).collect()
    );
}
