//! The crate's layering (written in `src/lib.rs`): a module may use only modules of lower
//! layers. This reads every source file under `src/` (comments and `#[cfg(test)]` code left
//! out) and fails on any `crate::<module>` path that runs upward or sideways, unless the pair
//! is one of the few known exceptions listed here (which may only shrink).

use std::collections::BTreeSet;
use std::path::Path;

/// Every top-level module and its layer (lowest first).
const LAYERS: &[(&str, u8)] = &[
    ("backoff", 0),
    ("names", 0),
    ("sync", 0),
    ("text", 0),
    ("confine", 0),
    ("egress", 0),
    ("cli", 0),
    ("command_path", 0),
    ("shutdown", 0),
    ("systemd", 0),
    ("config", 1),
    ("store", 1),
    ("skills", 1),
    ("observability", 2),
    ("embeddings", 2),
    ("ops", 3),
    ("platform", 3),
    ("setup", 4),
    ("attachments", 4),
    ("agent", 4),
    ("session", 4),
    ("reminders", 4),
    ("skill_api", 5),
    ("gateway", 6),
    ("conversation", 7),
    ("handlers", 8),
    ("maintenance", 8),
    ("app", 9),
];

/// Imports that run against the layers today, each with where and why. Remove an entry when
/// its import goes; never add one to let a new import through.
const EXCEPTIONS: &[(&str, &str)] = &[];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// The code of a file without comments and without what follows its first `#[cfg(test)]`.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules named by `crate::<name>` in `code`.
fn used_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.insert(name);
    }
    out
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_uses_one_of_its_own_layer_or_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut wrong = Vec::new();
    let mut seen_exceptions = BTreeSet::new();
    for path in all {
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let own = layer(&module).unwrap_or_else(|| {
            panic!("src/{module} has no layer: add it to LAYERS here and to the map in src/lib.rs")
        });
        let text = std::fs::read_to_string(&path).unwrap();
        for used in used_modules(&code(&text)) {
            let Some(theirs) = layer(&used) else {
                continue;
            };
            if used == module || theirs < own {
                continue;
            }
            if EXCEPTIONS.contains(&(module.as_str(), used.as_str())) {
                seen_exceptions.insert((module.clone(), used.clone()));
                continue;
            }
            wrong.push(format!(
                "src/{} (layer {own}) uses crate::{used} (layer {theirs})",
                rel.display()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
    let stale: Vec<_> = EXCEPTIONS
        .iter()
        .filter(|(a, b)| !seen_exceptions.contains(&((*a).to_owned(), (*b).to_owned())))
        .collect();
    assert!(
        stale.is_empty(),
        "exceptions no longer needed, remove them: {stale:?}"
    );
}

#[test]
fn comments_and_tests_do_not_count() {
    let text = "use crate::store::Store; // crate::app\n/// [`crate::handlers`]\nfn f() {}\n#[cfg(test)]\nmod tests { use crate::app; }";
    assert_eq!(
        used_modules(&code(text)).into_iter().collect::<Vec<_>>(),
        ["store"]
    );
}
