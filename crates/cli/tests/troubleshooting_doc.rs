//! docs/troubleshooting.md quotes platter's messages as it prints them:
//! each message its tables quote is cut at the example values in it
//! (names, numbers, paths), where the system's own words begin, and at
//! each ": " joining its parts, and every run of three or more words left must
//! be in the source of a crate, as written there (string continuations
//! joined). A message reworded in the code without the page fails here.

use std::path::Path;

/// Every crate's source, string continuations (`\` at a line's end)
/// joined and blanks collapsed.
fn source_text() -> String {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut text = String::new();
    let mut dirs = vec![crates];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("tests") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut joined = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        match line.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                if let Some(next) = lines.peek_mut() {
                    *next = next.trim_start();
                }
            }
            None => {
                joined.push_str(line);
                joined.push('\n');
            }
        }
    }
    joined.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A word of a quoted message that stands for a value of the example:
/// numbers, names, paths, uuids.
fn is_example(word: &str) -> bool {
    const NAMES: &[&str] = &[
        "m0", "m2", "m3", "m4", "m2-copy", "o0", "'t'", "t", "('t')", "Faulty", "m2's", "(socket)",
        "(dirty)",
    ];
    word.chars()
        .any(|c| c.is_ascii_digit() || c == '/' || c == '…')
        || word.contains("...")
        || NAMES.contains(&word.trim_end_matches([',', ':', ';']))
        || word.contains("'other'")
}

/// The first cell of each table row, when it is one quoted message.
fn quoted_messages(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(m, _)| m.to_string()))
        .filter(|m| !m.contains('`'))
        .collect()
}

/// Whether `run` is in the source whole, or in two pieces: a value the
/// code puts between two literals (`file{}` then " (not found)").
fn in_source(source: &str, run: &str) -> bool {
    let words: Vec<&str> = run.split(' ').collect();
    source.contains(run)
        || (1..words.len()).any(|k| {
            let (a, b) = (words[..k].join(" "), words[k..].join(" "));
            (k >= 3 || words.len() - k >= 3) && source.contains(&a) && source.contains(&b)
        })
}

#[test]
fn the_troubleshooting_page_quotes_messages_platter_prints() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/troubleshooting.md");
    let page = std::fs::read_to_string(page).unwrap();
    let source = source_text();
    let messages = quoted_messages(&page);
    assert!(messages.len() > 25, "{messages:#?}");
    let mut checked = 0;
    for message in &messages {
        // What follows a parenthesis opening with a capital is worded by
        // the system or a value's Debug form: "(Resource temporarily
        // unavailable (os error 11))", "(Online)".
        let words: Vec<&str> = message
            .split_whitespace()
            .take_while(|w| !w.starts_with('(') || !w[1..].starts_with(char::is_uppercase))
            .collect();
        // Messages are made of parts joined by ": " (the member, the
        // operation, the error): each part is looked for on its own.
        let parts = words.split_inclusive(|w| w.ends_with([':', ';']));
        // A number's unit is part of the value ("5 members", "16 bytes").
        let runs = parts.flat_map(|p| {
            let example: Vec<bool> = (0..p.len())
                .map(|i| {
                    is_example(p[i])
                        || (i > 0 && p[i - 1].starts_with(|c: char| c.is_ascii_digit()))
                })
                .collect();
            let mut at = 0;
            p.split(move |_| {
                at += 1;
                example[at - 1]
            })
        });
        for run in runs.filter(|r| r.len() >= 3) {
            // Where a value follows, the source has a placeholder ({e}).
            let run = run.join(" ");
            let run = run.trim_end_matches([',', ';', ':']);
            assert!(
                in_source(&source, run),
                "docs/troubleshooting.md quotes {message:?}, but {run:?} is in no crate's source"
            );
            checked += 1;
        }
    }
    assert!(checked > messages.len(), "{checked} runs checked");
}
