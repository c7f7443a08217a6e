//! The crate's layering (the Layers table in `src/lib.rs`, read from there): a module may use
//! only modules of lower layers. This reads every source file under `src/` (comments and
//! `#[cfg(test)]` code left out) and fails on any `crate::<module>` path that runs upward or
//! sideways. There are no exceptions: code that needs a higher layer belongs in that layer.

use std::collections::BTreeSet;
use std::path::Path;

/// Every top-level module and its layer, read from the Layers table in the crate doc of
/// `src/lib.rs` (a row: the layer's number, then its modules, each in backticks), so the rule
/// is written in one place.
fn layers() -> Vec<(String, u8)> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let text = std::fs::read_to_string(lib).unwrap();
    let mut out = Vec::new();
    for row in text.lines().filter_map(|l| l.strip_prefix("//! |")) {
        let mut cells = row.split('|');
        let (Some(layer), Some(modules)) = (cells.next(), cells.next()) else {
            continue;
        };
        let Ok(layer) = layer.trim().parse::<u8>() else {
            continue;
        };
        let names = modules.split('`').skip(1).step_by(2);
        out.extend(names.map(|name| (name.to_owned(), layer)));
    }
    assert!(!out.is_empty(), "no Layers table found in src/lib.rs");
    out
}

fn layer(layers: &[(String, u8)], module: &str) -> Option<u8> {
    layers.iter().find(|(m, _)| m == module).map(|(_, l)| *l)
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
    let layers = layers();
    let mut wrong = Vec::new();
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
        let own = layer(&layers, &module).unwrap_or_else(|| {
            panic!(
                "src/{module} has no layer: add it to the Layers table and the map in src/lib.rs"
            )
        });
        let text = std::fs::read_to_string(&path).unwrap();
        for used in used_modules(&code(&text)) {
            let Some(theirs) = layer(&layers, &used) else {
                continue;
            };
            if used == module || theirs < own {
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
}

#[test]
fn the_layers_table_names_each_module_of_the_crate_once() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let declared: BTreeSet<String> = std::fs::read_to_string(lib)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect();
    let layers = layers();
    let listed: BTreeSet<String> = layers.iter().map(|(m, _)| m.clone()).collect();
    assert_eq!(
        listed.len(),
        layers.len(),
        "a module listed twice: {layers:?}"
    );
    assert_eq!(
        listed, declared,
        "the Layers table and the `pub mod` list differ"
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
