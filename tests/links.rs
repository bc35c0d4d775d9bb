//! The README's, the design document's and the crates' documentation links
//! resolve inside the repository: a clone has everything they point to, and
//! nothing points outside it (no `../` out of the repository, no path that
//! does not exist).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Markdown link targets `](target)` in `text`, without anchors.
fn markdown_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = rest[..end].split('#').next().unwrap_or("").trim();
            if !target.is_empty() {
                out.push(target.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

/// The repository's top-level folders (`docs`, `src`, `jit`, ...).
fn top_folders() -> Vec<String> {
    std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect()
}

/// The extensions of the repository's own files that docs name.
const EXTENSIONS: [&str; 15] = [
    "rs", "md", "toml", "obc", "ofk", "ofs", "ptx", "cu", "py", "sh", "json", "csv", "txt", "svg",
    "lock",
];

/// Repository paths and file names named in backquotes or links:
/// `docs/DESIGN.md`, `examples/tour.ofs`, `env.rs`, or a relative path
/// out of the repository. A path starting with one of the repository's
/// top-level folders, or a file name with one of its files' extensions,
/// must exist: a path beside the naming file, in a folder above it or
/// from the root; a bare file name there too, or anywhere in the
/// repository.
fn named_paths(text: &str) -> Vec<String> {
    let dirs = top_folders();
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            let file = w.rsplit('/').next().unwrap_or("");
            let ext = file.rsplit_once('.').map_or("", |(_, e)| e);
            let file_like = EXTENSIONS.contains(&ext) && !file.starts_with('.');
            // `tests/repl/NAME.ofs`: a placeholder, not a path.
            let stem = file.split('.').next().unwrap_or("");
            let placeholder =
                !stem.is_empty() && stem.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            if placeholder {
                return false;
            }
            let in_folder = w
                .split_once('/')
                .is_some_and(|(top, _)| dirs.iter().any(|d| d == top));
            !w.contains([' ', '*', '{', '<', '$', '(', ':', '='])
                && (w.ends_with(".md")
                    || w.starts_with("../")
                    || (file_like && (in_folder || !w.contains('/'))))
        })
        .map(str::to_string)
        .collect()
}

fn check(file: &Path, text: &str, bad: &mut Vec<String>) {
    let dir = file.parent().unwrap();
    let mut targets = markdown_links(text);
    targets.extend(named_paths(text));
    for t in targets {
        if t.starts_with("http://") || t.starts_with("https://") {
            bad.push(format!(
                "{}: links outside the repository: {t}",
                file.display()
            ));
            continue;
        }
        // Rust intra-doc links (`[`Runtime`]`, `crate::x`) are not paths.
        if t.contains("::") || !(t.contains('/') || t.contains('.')) {
            continue;
        }
        // Beside the file, in a folder above it, or from the root.
        let mut candidates: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| d.starts_with(root()))
            .map(|d| d.join(&t))
            .collect();
        candidates.push(root().join(&t));
        if !t.contains('/') {
            candidates.extend(files_named(&t));
        }
        let Some(found) = candidates.iter().find(|p| p.exists()) else {
            bad.push(format!("{}: `{t}` does not exist", file.display()));
            continue;
        };
        let (Ok(found), Ok(repo)) = (found.canonicalize(), root().canonicalize()) else {
            continue;
        };
        if !found.starts_with(&repo) {
            bad.push(format!(
                "{}: `{t}` is outside the repository",
                file.display()
            ));
        }
    }
}

/// Every file of the repository named `name`.
fn files_named(name: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let n = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if !["target", ".git"].contains(&n.as_str()) {
                    walk(&p, name, out);
                }
            } else if n == name {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), name, &mut out);
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            if !["target", ".git", "node_modules"].contains(&name.as_str()) {
                sources(&p, out);
            }
        } else if name.ends_with(".rs") || name.ends_with(".md") {
            out.push(p);
        }
    }
}

#[test]
fn documentation_links_resolve_inside_the_repository() {
    let mut files = Vec::new();
    sources(&root(), &mut files);
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let text = if f.extension().is_some_and(|e| e == "rs") {
            // Only documentation: `//!` and `///` lines.
            text.lines()
                .filter_map(|l| {
                    let l = l.trim_start();
                    l.strip_prefix("//!").or_else(|| l.strip_prefix("///"))
                })
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            text
        };
        check(f, &text, &mut bad);
    }
    assert!(files.len() > 50, "found the sources: {}", files.len());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_design_document_is_in_the_repository_and_linked_from_the_readme() {
    assert!(root().join("docs/DESIGN.md").is_file());
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("](docs/DESIGN.md)"));
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    assert!(lib.contains("docs/DESIGN.md"));
}

#[test]
fn a_file_name_that_is_nowhere_is_caught_in_any_folder() {
    let mut bad = Vec::new();
    let file = root().join("src/lib.rs");
    check(
        &file,
        "`cuda.rs` was a file; `env.rs`, `cuda/launch.rs`, `jit/src/lower/mod.rs` and `Runtime::new` are fine",
        &mut bad,
    );
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("`cuda.rs` does not exist"), "{bad:?}");
    // Every top-level folder is checked, not a list of them.
    check(&root().join("README.md"), "`gang/src/nowhere.rs`", &mut bad);
    assert_eq!(bad.len(), 2, "{bad:?}");
}
