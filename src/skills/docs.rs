//! Docs-versus-contract drift (validator check 4): finds every `--flag` a SKILL.md body
//! mentions and attributes it to the skill whose script the line invokes, so the validator can
//! prove the agent is never taught a flag the API rejects and every flag is documented.

/// One `--flag` mention in a SKILL.md body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagMention {
    /// The skill the mention belongs to: the last `scripts/<name>` seen earlier on the same
    /// line, else the skill whose body it is.
    pub skill: String,
    /// The flag without its leading dashes (`message-file`, `no-enabled`).
    pub flag: String,
    /// 1-based line number within the body.
    pub line: usize,
}

/// Scans a body for `--flag` mentions. A mention starts with `--` that is not preceded by a
/// word character or `-`, followed by a lowercase letter; `skills/<x>/scripts/<x>` (or
/// `scripts/<x>`) switches the attribution to skill `<x>` for the rest of the line.
pub fn flag_mentions(body: &str, own_skill: &str) -> Vec<FlagMention> {
    let mut out = Vec::new();
    for (idx, line) in body.lines().enumerate() {
        let mut current = own_skill.to_owned();
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i..].starts_with(b"scripts/") {
                let start = i + "scripts/".len();
                let end = word_end(bytes, start);
                if end > start {
                    current = line[start..end].to_owned();
                }
                i = end.max(i + 1);
                continue;
            }
            let boundary = i == 0 || !is_word(bytes[i - 1]) && bytes[i - 1] != b'-';
            if boundary
                && bytes[i..].starts_with(b"--")
                && bytes.get(i + 2).is_some_and(u8::is_ascii_lowercase)
            {
                let start = i + 2;
                let end = word_end(bytes, start);
                let flag = line[start..end].trim_end_matches('-');
                out.push(FlagMention {
                    skill: current.clone(),
                    flag: flag.to_owned(),
                    line: idx + 1,
                });
                i = end;
                continue;
            }
            i += 1;
        }
    }
    out
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn word_end(bytes: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < bytes.len()
        && (bytes[end].is_ascii_lowercase() || bytes[end].is_ascii_digit() || bytes[end] == b'-')
    {
        end += 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_attributes_mentions() {
        let body = "Use `--limit 5` or --query-file.\n\
                    Then run skills/edit-reply/scripts/edit-reply --message-id 1 --message-file f\n\
                    a--b is not a flag, nor is ---, nor --Upper; --no-enabled is.\n\
                    ünï “…” 日本 --limit\n";
        let m = flag_mentions(body, "send-reply");
        let got: Vec<(&str, &str, usize)> = m
            .iter()
            .map(|m| (m.skill.as_str(), m.flag.as_str(), m.line))
            .collect();
        assert_eq!(
            got,
            [
                ("send-reply", "limit", 1),
                ("send-reply", "query-file", 1),
                ("edit-reply", "message-id", 2),
                ("edit-reply", "message-file", 2),
                ("send-reply", "no-enabled", 3),
                ("send-reply", "limit", 4),
            ]
        );
    }
}
