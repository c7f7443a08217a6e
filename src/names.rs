//! Name rules used in several layers, each in one place: what a skill may be called (checked
//! by the configuration, the skill validator and the Skill API's registry), what a Discord id
//! looks like (the configuration's `guildIds` and the Discord adapter), what can name a language
//! of the daemon's texts (the configuration and `conversation::notices`), and how a parameter's
//! camelCase name is spelled as a command-line flag (the skill client and Misskey's text
//! commands).

/// A skill name: 1–64 of `[a-z0-9-]`, no leading, trailing or double hyphen (the Agent Skills
/// rule; `skills::frontmatter` reports each broken part in the validator's words).
pub fn is_skill_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// A Discord snowflake: a non-zero unsigned 64-bit decimal number (at most 20 digits).
pub fn parse_snowflake(id: &str) -> Option<u64> {
    if id.is_empty() || id.len() > 20 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse::<u64>().ok().filter(|v| *v != 0)
}

/// A language tag naming a file of the daemon's texts: BCP 47-like (`en`, `ja`, `pt-BR`,
/// `zh-Hant`) — 2-3 lowercase letters, then `-`-separated parts of 1-8 letters or digits — so it
/// is also a safe file name.
pub fn is_language_tag(tag: &str) -> bool {
    let mut parts = tag.split('-');
    let primary = parts.next().unwrap_or_default();
    tag.len() <= 35
        && (2..=3).contains(&primary.len())
        && primary.bytes().all(|b| b.is_ascii_lowercase())
        && parts.all(|p| (1..=8).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// `reminderId` (or `reminder_id`) → `reminder-id`: a parameter as a flag.
pub fn to_kebab(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            if !out.is_empty() {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '_' {
            out.push('-');
        } else {
            out.push(c);
        }
    }
    out
}

/// `reminder-id` → `reminderId`: a flag as a parameter.
pub fn to_camel(flag: &str) -> String {
    let mut out = String::with_capacity(flag.len());
    let mut upper = false;
    for c in flag.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_names_follow_the_agent_skills_rule() {
        for ok in ["send-reply", "a", "memory-save2", &"x".repeat(64)] {
            assert!(is_skill_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "Send",
            "a_b",
            "a b",
            "ä",
            &"x".repeat(65),
        ] {
            assert!(!is_skill_name(bad), "{bad}");
        }
    }

    #[test]
    fn snowflakes_are_non_zero_u64_decimals() {
        assert_eq!(parse_snowflake("123"), Some(123));
        assert_eq!(parse_snowflake("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "0",
            "-1",
            "1e3",
            "18446744073709551616",
            "123456789012345678901",
            "١٢",
        ] {
            assert_eq!(parse_snowflake(bad), None, "{bad}");
        }
    }

    #[test]
    fn flags_and_parameters_convert_both_ways() {
        for (param, flag) in [
            ("reminderId", "reminder-id"),
            ("enabledOnly", "enabled-only"),
            ("limit", "limit"),
            ("fileIds", "file-ids"),
        ] {
            assert_eq!(to_kebab(param), flag);
            assert_eq!(to_camel(flag), param);
        }
        assert_eq!(to_kebab("message_file"), "message-file");
        assert_eq!(to_kebab("Id"), "id", "no leading hyphen");
    }

    #[test]
    fn language_tags_are_safe_file_names() {
        for good in ["en", "ja", "pt-BR", "zh-Hant", "yue"] {
            assert!(is_language_tag(good), "{good}");
        }
        for bad in [
            "", "e", "EN", "english", "../en", "en/..", "en-", "ja.md", "en_US", "d\u{e9}",
        ] {
            assert!(!is_language_tag(bad), "{bad}");
        }
    }
}
