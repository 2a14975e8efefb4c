//! The README and the docs stand alone in a clone (issue 41): every
//! relative link in them names a file of the repository, and none points
//! outside it (`../shared`, next to the repository where it was written,
//! is in no clone; nor is the DESIGN.md that lived there).

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown and scripts a reader of a clone uses.
fn pages() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md"), root.join("data/disksim/README.md")];
    for dir in [
        "docs",
        "docs/research",
        "bench",
        "scripts",
        "contrib",
        "contrib/systemd",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files
}

/// The targets of `[text](target)` links, anchors left off.
fn links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let end = rest.find(')')?;
            Some(rest[..end].split('#').next().unwrap_or("").to_string())
        })
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

#[test]
fn every_relative_link_names_a_file_of_the_repository() {
    let root = repo().canonicalize().unwrap();
    let mut checked = 0;
    for page in pages()
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(page).unwrap();
        for target in links(&text) {
            let path = page.parent().unwrap().join(&target);
            let found = path.canonicalize();
            assert!(
                found.as_ref().is_ok_and(|p| p.starts_with(&root)),
                "{}: the link {target} names no file of the repository",
                page.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} links");
}

#[test]
fn nothing_points_outside_the_repository() {
    for page in pages() {
        let Ok(text) = std::fs::read_to_string(&page) else {
            continue;
        };
        for outside in ["../shared", "DESIGN.md"] {
            assert!(
                !text.contains(outside),
                "{} names {outside}, which a clone does not have",
                page.display()
            );
        }
    }
}
