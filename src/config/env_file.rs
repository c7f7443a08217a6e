//! Values the service way: a variable `NAME` may also come from a file, as systemd and
//! container runtimes hand secrets over without putting them in the environment.
//!
//! In order: `NAME` itself; else the file named by `NAME_FILE`; else `NAME` in systemd's
//! credentials folder (`$CREDENTIALS_DIRECTORY/NAME`, from `LoadCredential=`). One trailing
//! newline is dropped (`echo token > file`). A file that is named but cannot be read, or is
//! larger than [`MAX_BYTES`], is a problem the configuration loader reports at the key the
//! variable sets; its content is never part of a message. [`super::ProcessEnv`] reads every
//! variable this way, so the loader, the log redactor's secret set and the model gateway's
//! provider keys all get it.

use std::io::Read;
use std::path::Path;

/// Largest value read from a file (a token or a key, not a document).
pub const MAX_BYTES: u64 = 64 * 1024;

/// The value of `name`: `Ok(None)` when it is set nowhere, `Err` (why, naming the file) when a
/// file that should hold it cannot be read. `getenv` reads the process environment.
pub fn resolve(
    name: &str,
    getenv: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    if let Some(value) = getenv(name) {
        return Ok(Some(value));
    }
    let file_var = format!("{name}_FILE");
    if let Some(path) = getenv(&file_var).filter(|p| !p.trim().is_empty()) {
        return read(Path::new(&path))
            .map(Some)
            .map_err(|why| format!("{file_var}={path}: {why}"));
    }
    if let Some(dir) = getenv("CREDENTIALS_DIRECTORY").filter(|d| !d.trim().is_empty()) {
        let path = Path::new(&dir).join(name);
        if path.exists() {
            return read(&path)
                .map(Some)
                .map_err(|why| format!("credential {}: {why}", path.display()));
        }
    }
    Ok(None)
}

/// The file's text without one trailing newline.
fn read(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let mut text = String::new();
    file.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read it as text: {e}"))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(format!("larger than {} KiB", MAX_BYTES / 1024));
    }
    if let Some(stripped) = text.strip_suffix('\n') {
        text.truncate(stripped.strip_suffix('\r').unwrap_or(stripped).len());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_variable_wins_then_its_file_then_the_credentials_folder() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\n").unwrap();
        let creds = dir.path().join("creds");
        std::fs::create_dir(&creds).unwrap();
        std::fs::write(creds.join("DISCORD_TOKEN"), "from-credentials\r\n").unwrap();
        let path = file.display().to_string();
        let folder = creds.display().to_string();

        let all = env(&[
            ("DISCORD_TOKEN", "from-env".into()),
            ("DISCORD_TOKEN_FILE", path.clone()),
            ("CREDENTIALS_DIRECTORY", folder.clone()),
        ]);
        assert_eq!(resolve("DISCORD_TOKEN", &all), Ok(Some("from-env".into())));
        let file_and_creds = env(&[
            ("DISCORD_TOKEN_FILE", path),
            ("CREDENTIALS_DIRECTORY", folder.clone()),
        ]);
        assert_eq!(
            resolve("DISCORD_TOKEN", &file_and_creds),
            Ok(Some("from-file".into())),
            "one trailing newline dropped"
        );
        let creds_only = env(&[("CREDENTIALS_DIRECTORY", folder)]);
        assert_eq!(
            resolve("DISCORD_TOKEN", &creds_only),
            Ok(Some("from-credentials".into()))
        );
        assert_eq!(resolve("MISSKEY_TOKEN", &creds_only), Ok(None));
        assert_eq!(resolve("MISSKEY_TOKEN", env(&[])), Ok(None));
    }

    #[test]
    fn a_file_that_cannot_be_read_is_a_problem_naming_it_not_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope").display().to_string();
        let why = resolve(
            "DISCORD_TOKEN",
            env(&[("DISCORD_TOKEN_FILE", missing.clone())]),
        )
        .unwrap_err();
        assert!(
            why.starts_with(&format!("DISCORD_TOKEN_FILE={missing}: cannot open it")),
            "{why}"
        );
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(MAX_BYTES as usize + 1)).unwrap();
        let why = resolve(
            "DISCORD_TOKEN",
            env(&[("DISCORD_TOKEN_FILE", big.display().to_string())]),
        )
        .unwrap_err();
        assert!(
            why.ends_with("larger than 64 KiB") && !why.contains("xxx"),
            "{why}"
        );
        let folder = dir.path().join("creds");
        std::fs::create_dir_all(folder.join("DISCORD_TOKEN")).unwrap();
        let why = resolve(
            "DISCORD_TOKEN",
            env(&[("CREDENTIALS_DIRECTORY", folder.display().to_string())]),
        )
        .unwrap_err();
        assert!(why.starts_with("credential "), "{why}");
    }
}
