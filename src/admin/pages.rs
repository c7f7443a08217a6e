//! The console's HTML, server-rendered with `maud` (every value escaped): the layout shared by
//! every page, the login outcomes, and *Now*. Pages work without JavaScript; `console.js` only
//! refreshes the live section (`/admin/now/live`) every two seconds. No inline script or
//! style: the Content-Security-Policy allows only the console's own files.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, html};

use crate::ops::CheckReport;
use crate::store::analytics::{SkillCallSummary, WorkspaceOverview};
use crate::store::{LlmUsage, Memory};

/// One running turn as *Now* shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnView {
    /// Our session id.
    pub session_id: String,
    /// `discord`, `misskey`, `console`.
    pub platform: String,
    /// Who it answers (their name, else their id).
    pub user: String,
    /// The `places:` rule that applies (`default` when none).
    pub place: String,
    /// A direct message: nothing of what is done is shown but its kind.
    pub dm: bool,
    /// How long its agent has run.
    pub elapsed_ms: u64,
    /// `starting`, `thinking` or the tool's title.
    pub doing: String,
    /// The tool's command line (public places only).
    pub command: Option<String>,
}

/// What *Now* shows.
#[derive(Debug, Clone, Default)]
pub struct NowView {
    /// The readiness checks (platforms, database, sandbox, ...).
    pub checks: Vec<CheckReport>,
    /// The running turns.
    pub turns: Vec<TurnView>,
    /// Every user's model tokens today (UTC), when the database answered.
    pub tokens_today: Option<LlmUsage>,
    /// What those cost at `admin.cost`'s prices, and in what, when they are set.
    pub cost_today: Option<(f64, String)>,
    /// Every user's model tokens (input and output) per UTC day of the last seven, oldest
    /// first; days without any left out.
    pub tokens_week: Vec<(String, u64)>,
    /// The idle warm agents, when `agent.warm` keeps any.
    pub warm: Option<Vec<WarmView>>,
}

/// An idle warm agent as *Now* shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmView {
    /// `discord`, `misskey`, `console`.
    pub platform: String,
    /// Its conversation's channel.
    pub channel: String,
    /// The user it answers.
    pub user: String,
    /// A direct message.
    pub dm: bool,
    /// How long it has been idle.
    pub idle_ms: u64,
    /// Turns it has answered.
    pub turns: u32,
    /// Started ahead of a message, never prompted.
    pub ahead: bool,
}

/// A whole page: `title`, the session's CSRF token (for the log-out form), and `body`.
pub fn layout(title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · air-friends" }
                link rel="stylesheet" href="/admin/assets/console.css";
                @if csrf.is_some() {
                    script src="/admin/assets/console.js" defer {}
                }
            }
            body {
                header {
                    strong { "air-friends" }
                    @if let Some(csrf) = csrf {
                        nav {
                            a href="/admin/" { "Now" }
                            a href="/admin/conversations" { "Conversations" }
                            a href="/admin/users" { "Users" }
                            a href="/admin/memories" { "Memories" }
                            a href="/admin/skills" { "Skills" }
                            a href="/admin/config" { "Config" }
                            a href="/admin/chat" { "Chat" }
                        }
                        form method="post" action="/admin/logout" class="logout" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// What a request without a valid session gets.
pub fn logged_out() -> Markup {
    layout(
        "Log in",
        None,
        html! {
            h1 { "Log in" }
            p { "The console needs a login link. On the machine that runs the bot:" }
            pre { "air-friends admin-link" }
            p { "Open the link it prints (it works once, for a few minutes)." }
        },
    )
}

/// A login link that was used, expired or never issued.
pub fn link_refused() -> Markup {
    layout(
        "Link not valid",
        None,
        html! {
            h1 { "This link is not valid" }
            p { "A login link works once and only for a few minutes. Ask for a new one with "
                code { "air-friends admin-link" } "." }
        },
    )
}

/// *Now*: the whole page.
pub fn now(view: &NowView, csrf: &str) -> Markup {
    layout(
        "Now",
        Some(csrf),
        html! {
            h1 { "Now" }
            section id="live" data-src="/admin/now/live" { (live(view, csrf)) }
        },
    )
}

/// *Now*'s live section (what the page refreshes).
pub fn live(view: &NowView, csrf: &str) -> Markup {
    html! {
        h2 { "Health" }
        table class="checks" {
            thead { tr { th { "Check" } th { "State" } th { "Detail" } } }
            tbody {
                @for c in &view.checks {
                    tr class=(if c.ok { "ok" } else if c.degrades { "degraded" } else { "failing" }) {
                        td { (c.name) }
                        td { (if c.ok { "ok" } else if c.degrades { "degraded" } else { "failing" }) }
                        td { (c.detail.as_deref().or(c.info.as_deref()).unwrap_or("")) }
                    }
                }
            }
        }
        h2 { "Running turns (" (view.turns.len()) ")" }
        @if view.turns.is_empty() {
            p class="empty" { "No turn is running." }
        } @else {
            table class="turns" {
                thead { tr { th { "User" } th { "Place" } th { "Running for" } th { "Doing" } th {} } }
                tbody {
                    @for t in &view.turns {
                        tr data-session=(t.session_id) {
                            td { (t.platform) " · " (t.user) @if t.dm { " " span class="tag" { "DM" } } }
                            td { (t.place) }
                            td { a href={ "/admin/turns/" (t.session_id) } { (seconds(t.elapsed_ms)) } }
                            td {
                                (t.doing)
                                @if let Some(command) = &t.command {
                                    " " code { (command) }
                                }
                            }
                            td {
                                form method="post" action={ "/admin/turns/" (t.session_id) "/cancel" } {
                                    input type="hidden" name="csrf" value=(csrf);
                                    button type="submit" { "Cancel" }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(warm) = &view.warm {
            h2 { "Warm agents (" (warm.len()) " idle)" }
            @if warm.is_empty() {
                p class="empty" { "No agent is waiting for its conversation's next message." }
            } @else {
                table class="warm" {
                    thead { tr { th { "Conversation" } th { "Idle for" } th { "Turns" } th {} } }
                    tbody {
                        @for w in warm {
                            tr {
                                td { (w.platform) " · " (w.user)
                                    @if w.dm { " " span class="tag" { "DM" } } @else { " in " code { (w.channel) } }
                                    @if w.ahead { " " span class="tag" { "started ahead" } } }
                                td { (seconds(w.idle_ms)) }
                                td { (w.turns) }
                                td {
                                    form method="post" action="/admin/warm/retire" {
                                        input type="hidden" name="csrf" value=(csrf);
                                        input type="hidden" name="platform" value=(w.platform);
                                        input type="hidden" name="channel" value=(w.channel);
                                        input type="hidden" name="user" value=(w.user);
                                        input type="hidden" name="dm" value=(w.dm);
                                        button type="submit" { "Retire" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Today" }
        @match &view.tokens_today {
            Some(u) => p { (u.input_tokens) " input and " (u.output_tokens) " output tokens in "
                (u.requests) " model responses (UTC day)."
                @if let Some((cost, currency)) = &view.cost_today {
                    " About " (format!("{cost:.2}")) " " (currency) " at the prices of " code { "admin.cost" } "."
                } },
            None => p class="empty" { "The usage could not be read." },
        }
        @if !view.tokens_week.is_empty() {
            h2 { "Tokens, last 7 days" }
            (bars(view.tokens_week.iter().map(|(day, n)| (day.clone(), *n, n.to_string()))))
        }
    }
}

/// What *Skills* shows: every skill's calls over the last day and the last week.
#[derive(Debug, Clone, Default)]
pub struct SkillsView {
    /// The last 24 hours, by skill.
    pub day: BTreeMap<String, SkillCallSummary>,
    /// The last 7 days, by skill.
    pub week: BTreeMap<String, SkillCallSummary>,
}

/// *Skills*: calls, errors by code and latency per skill (what `air-friends stats` computes),
/// with a chart of each skill's calls and p99 over the week.
pub fn skills(view: &SkillsView, csrf: &str) -> Markup {
    let ms = |v: Option<u64>| v.map_or("-".to_owned(), |ms| format!("≤ {ms} ms"));
    layout(
        "Skills",
        Some(csrf),
        html! {
            h1 { "Skills" }
            @if view.week.is_empty() {
                p class="empty" { "No skill call recorded yet (the call log is written once a minute)." }
            } @else {
                table class="skills" {
                    thead {
                        tr { th {} th colspan="4" { "last 24 hours" } th colspan="4" { "last 7 days" } th { "errors (7 days)" } }
                        tr { th { "Skill" } th { "calls" } th { "errors" } th { "p50" } th { "p99" }
                             th { "calls" } th { "errors" } th { "p50" } th { "p99" } th {} }
                    }
                    tbody {
                        @for (skill, week) in &view.week {
                            @let day = view.day.get(skill).cloned().unwrap_or_default();
                            tr {
                                td { (skill) }
                                td { (day.calls) } td { (day.error_count()) }
                                td { (ms(day.quantile_ms(0.5))) } td { (ms(day.quantile_ms(0.99))) }
                                td { (week.calls) } td { (week.error_count()) }
                                td { (ms(week.quantile_ms(0.5))) } td { (ms(week.quantile_ms(0.99))) }
                                td {
                                    @for (code, n) in &week.errors { code { (code) } " " (n) " " }
                                }
                            }
                        }
                    }
                }
                h2 { "Calls in the last 7 days" }
                (bars(view.week.iter().map(|(k, v)| (k.clone(), v.calls, v.calls.to_string()))))
                h2 { "p99 latency in the last 7 days" }
                (bars(view.week.iter().map(|(k, v)| {
                    let p99 = v.quantile_ms(0.99).unwrap_or(0);
                    (k.clone(), p99, ms(v.quantile_ms(0.99)))
                })))
            }
        },
    )
}

/// A horizontal bar chart in SVG (attributes only: the CSP allows no inline style), each bar
/// labelled with its name and value so the numbers read without the picture.
pub fn bars(rows: impl Iterator<Item = (String, u64, String)>) -> Markup {
    const ROW: u64 = 22;
    const LABEL: u64 = 180;
    const WIDTH: u64 = 420;
    let rows: Vec<(String, u64, String)> = rows.collect();
    let max = rows.iter().map(|r| r.1).max().unwrap_or(0).max(1);
    let height = ROW * rows.len() as u64 + 4;
    html! {
        svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img"
            width=(LABEL + WIDTH + 120) height=(height) viewBox={ "0 0 " (LABEL + WIDTH + 120) " " (height) } {
            @for (i, (name, value, text)) in rows.iter().enumerate() {
                @let y = ROW * i as u64;
                text x="0" y=(y + 15) font-size="13" fill="currentColor" { (name) }
                rect x=(LABEL) y=(y + 3) height="14" width=(WIDTH * value / max) fill="#4f7cac" {}
                text x=(LABEL + WIDTH * value / max + 6) y=(y + 15) font-size="13" fill="currentColor" { (text) }
            }
        }
    }
}

/// A column chart in SVG (attributes only), one column per `(label, value)`, each value
/// written above its column and every `label_every`th label below, so the numbers read without
/// the picture.
pub fn columns(rows: &[(String, u64)], label_every: usize) -> Markup {
    const COLUMN: u64 = 26;
    const HEIGHT: u64 = 120;
    let max = rows.iter().map(|r| r.1).max().unwrap_or(0).max(1);
    let width = COLUMN * rows.len() as u64 + 8;
    let total = HEIGHT + 40;
    html! {
        svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img"
            width=(width) height=(total) viewBox={ "0 0 " (width) " " (total) } {
            @for (i, (label, value)) in rows.iter().enumerate() {
                @let x = COLUMN * i as u64;
                @let h = HEIGHT * value / max;
                rect x=(x + 3) y=(HEIGHT + 16 - h) width=(COLUMN - 6) height=(h) fill="#4f7cac" {}
                @if *value > 0 {
                    text x=(x + COLUMN / 2) y=(HEIGHT + 12 - h) font-size="11" text-anchor="middle" fill="currentColor" { (value) }
                }
                @if i % label_every.max(1) == 0 {
                    text x=(x + COLUMN / 2) y=(HEIGHT + 32) font-size="11" text-anchor="middle" fill="currentColor" { (label) }
                }
            }
        }
    }
}

/// One recorded message as *Conversations* shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRow {
    /// `discord`, `misskey`, `console`.
    pub platform: String,
    /// Who wrote it (their name, else their id).
    pub user: String,
    /// A direct message: its text is never shown.
    pub dm: bool,
    /// When it arrived.
    pub received_at: chrono::DateTime<chrono::Utc>,
    /// How long until its turn ended (settled messages).
    pub took_ms: Option<i64>,
    /// `queued`, `answered`, `failed`, `skipped`.
    pub state: String,
    /// Why, for `failed` and `skipped`.
    pub reason: Option<String>,
    /// Its text, for a public place only (clipped).
    pub text: Option<String>,
    /// Its turn, when the board still holds it.
    pub turn: Option<TurnFacts>,
}

/// What the board knows of a message's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnFacts {
    /// The turn's session (its timeline's address).
    pub session_id: String,
    /// Model tokens it used.
    pub tokens: u64,
    /// Skill calls it made.
    pub skill_calls: usize,
    /// The `places:` rule it ran under.
    pub place: String,
}

/// The states *Conversations* filters by.
pub const TURN_STATES: [&str; 4] = ["answered", "failed", "skipped", "queued"];

/// *Conversations*: the latest messages the bot was asked to answer, how each ended and how
/// long it took; a public message's text, never a direct message's.
pub fn conversations(
    rows: &[TurnRow],
    hours: &[(String, u64)],
    state: Option<&str>,
    csrf: &str,
) -> Markup {
    layout(
        "Conversations",
        Some(csrf),
        html! {
            h1 { "Conversations" }
            h2 { "Messages per hour, last 24 hours (UTC)" }
            (columns(hours, 3))
            p class="filters" {
                "Show: "
                a href="/admin/conversations" { "all" }
                @for s in TURN_STATES { " · " a href={ "/admin/conversations?state=" (s) } { (s) } }
                @if let Some(s) = state { " (showing " (s) ")" }
            }
            @if rows.is_empty() {
                p class="empty" { "No message recorded." }
            } @else {
                table class="turns" {
                    thead { tr { th { "Received (UTC)" } th { "User" } th { "Outcome" } th { "Took" }
                        th { "Place" } th { "Tokens" } th { "Skill calls" } th { "Message" } } }
                    tbody {
                        @for r in rows {
                            tr class=(r.state) data-platform=(r.platform) {
                                td { (r.received_at.format("%Y-%m-%d %H:%M:%S")) }
                                td { (r.platform) " · " (r.user) @if r.dm { " " span class="tag" { "DM" } } }
                                td { (r.state) @if let Some(why) = &r.reason { " (" (why) ")" } }
                                td { @if let Some(ms) = r.took_ms { (seconds(ms.max(0) as u64)) } }
                                @match &r.turn {
                                    Some(t) => {
                                        td { (t.place) }
                                        td { (t.tokens) }
                                        td { (t.skill_calls) " " a href={ "/admin/turns/" (t.session_id) } { "timeline" } }
                                    }
                                    None => { td {} td {} td {} }
                                }
                                td {
                                    @match &r.text {
                                        Some(text) => (text),
                                        None => span class="empty" { (if r.dm { "(a direct message)" } else { "" }) },
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// *Memories*: every workspace with its memories and reminders by state.
pub fn memories_index(overview: &BTreeMap<String, WorkspaceOverview>, csrf: &str) -> Markup {
    layout(
        "Memories",
        Some(csrf),
        html! {
            h1 { "Memories" }
            @if overview.is_empty() {
                p class="empty" { "No one has memories yet." }
            } @else {
                table {
                    thead { tr { th { "User" } th { "enabled" } th { "disabled" } th { "important" }
                                 th { "private" } th { "reminders pending" } } }
                    tbody {
                        @for (ws, o) in overview {
                            tr {
                                td { a href={ "/admin/memories/of?ws=" (ws) } { (ws) } }
                                td { (o.enabled) } td { (o.disabled) } td { (o.important) }
                                td { (o.private) }
                                td { (o.reminders.get("pending").copied().unwrap_or(0)) }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// One workspace's memories as the console shows them.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceView {
    /// `platform/user`.
    pub workspace: String,
    /// Its public memories, newest first (at most [`MEMORIES_SHOWN`]), or the search's hits.
    pub public: Vec<Memory>,
    /// Public memories in all.
    pub public_total: usize,
    /// Its private memories, newest first: what identifies each, never its text.
    pub private: Vec<PrivateMemory>,
    /// The search, when there is one.
    pub query: Option<String>,
}

/// A private memory as a workspace page lists it: its id and dates, not its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateMemory {
    /// Its id.
    pub id: String,
    /// When it was saved.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Whether it is enabled.
    pub enabled: bool,
}

/// How many public memories a workspace page lists.
pub const MEMORIES_SHOWN: usize = 200;

/// A workspace's public memories (newest first, or a search's hits), each with a button that
/// disables or enables it; private memories only as a count.
pub fn memories_of(view: &WorkspaceView, csrf: &str) -> Markup {
    layout(
        "Memories",
        Some(csrf),
        html! {
            h1 { "Memories of " (view.workspace) }
            form method="get" action="/admin/memories/of" class="search" {
                input type="hidden" name="ws" value=(view.workspace);
                input type="search" name="q" value=(view.query.as_deref().unwrap_or("")) placeholder="search public memories";
                button type="submit" { "Search" }
            }
            p {
                @match &view.query {
                    Some(q) => { (view.public.len()) " enabled public memories match " code { (q) } "." }
                    None => { (view.public_total) " public memories"
                        @if view.public_total > view.public.len() { " (the newest " (view.public.len()) " shown)" } "." }
                }
                " Private memories: " (view.private.len()) " (shown only to their owner, in a direct message)."
            }
            @if !view.public.is_empty() {
                table class="memories" {
                    thead { tr { th { "Saved" } th { "Memory" } th { "Importance" } th { "State" } th {} } }
                    tbody {
                        @for m in &view.public {
                            tr class=(if m.enabled { "enabled" } else { "disabled" }) {
                                td { (m.created_at.format("%Y-%m-%d %H:%M")) }
                                td { (m.content) }
                                td { (m.importance.as_str()) }
                                td { (if m.enabled { "enabled" } else { "disabled" }) }
                                td {
                                    form method="post" action="/admin/memories/toggle" {
                                        input type="hidden" name="csrf" value=(csrf);
                                        input type="hidden" name="ws" value=(view.workspace);
                                        input type="hidden" name="id" value=(m.id);
                                        input type="hidden" name="enabled" value=(if m.enabled { "false" } else { "true" });
                                        button type="submit" { (if m.enabled { "Disable" } else { "Enable" }) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if !view.private.is_empty() {
                h2 { "Private memories" }
                p { "Their text is not shown. Revealing one shows it to you once and is recorded in the log." }
                table class="memories private" {
                    thead { tr { th { "Saved" } th { "Id" } th { "State" } th {} } }
                    tbody {
                        @for m in view.private.iter().take(MEMORIES_SHOWN) {
                            tr {
                                td { (m.created_at.format("%Y-%m-%d %H:%M")) }
                                td { code { (m.id) } }
                                td { (if m.enabled { "enabled" } else { "disabled" }) }
                                td {
                                    form method="post" action="/admin/memories/reveal" {
                                        input type="hidden" name="csrf" value=(csrf);
                                        input type="hidden" name="ws" value=(view.workspace);
                                        input type="hidden" name="id" value=(m.id);
                                        button type="submit" { "Reveal" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// One private memory revealed to the operator (the answer to their request only).
pub fn revealed(memory: &Memory, csrf: &str) -> Markup {
    let ws = memory.workspace.to_string();
    layout(
        "Private memory",
        Some(csrf),
        html! {
            h1 { "A private memory of " (ws) }
            p class="notice" { "Revealed to you; this was recorded in the log." }
            table class="memories" {
                tbody {
                    tr { th { "Id" } td { code { (memory.id) } } }
                    tr { th { "Saved" } td { (memory.created_at.format("%Y-%m-%d %H:%M")) } }
                    tr { th { "Memory" } td class="revealed" { (memory.content) } }
                    tr { th { "Importance" } td { (memory.importance.as_str()) } }
                    tr { th { "State" } td { (if memory.enabled { "enabled" } else { "disabled" }) } }
                }
            }
            p { a href={ "/admin/memories/of?ws=" (ws) } { "Back to the memories of " (ws) } }
        },
    )
}

/// *Config*: the configuration as the daemon loaded it, every secret masked.
pub fn config(masked_yaml: &str, csrf: &str) -> Markup {
    layout(
        "Config",
        Some(csrf),
        html! {
            h1 { "Configuration" }
            p { "As loaded at start (a reload's live changes are in the log). Secrets print as "
                code { "***" } "." }
            pre class="config" { (masked_yaml) }
        },
    )
}

fn seconds(ms: u64) -> String {
    match ms / 1000 {
        s if s < 60 => format!("{s} s"),
        s => format!("{} min {} s", s / 60, s % 60),
    }
}

/// A turn's timeline.
pub fn timeline(turn: &crate::admin::board::TurnRecord, csrf: &str) -> Markup {
    let skills = turn.skill_calls();
    layout(
        "Turn",
        Some(csrf),
        html! {
            h1 { "A turn of " (turn.platform) " · " (turn.user) @if turn.dm { " " span class="tag" { "DM" } } }
            p {
                "Place " code { (turn.place) } ", started " (turn.since.format("%Y-%m-%d %H:%M:%S")) " UTC, "
                (if turn.ended { "took " } else { "running for " }) (seconds(turn.took_ms)) ", "
                (turn.tokens) " model tokens, " (skills.len()) " skill calls"
                @if !skills.is_empty() { " (" (skills.join(", ")) ")" } "."
            }
            table class="timeline" {
                thead { tr { th { "At" } th { "Doing" } th { "Command" } } }
                tbody {
                    @for step in &turn.steps {
                        tr {
                            td { (format!("+{:.2} s", step.at_ms as f64 / 1000.0)) }
                            td { (step.doing) }
                            td { @if let Some(c) = &step.command { code { (c) } } }
                        }
                    }
                }
            }
            @if turn.dm { p class="empty" { "A direct message's turn shows the kind of work only." } }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_dm_turns_show_no_command() {
        let view = NowView {
            turns: vec![TurnView {
                session_id: "s1".into(),
                platform: "discord".into(),
                user: "<script>alert(1)</script>".into(),
                place: "default".into(),
                dm: true,
                elapsed_ms: 61_000,
                doing: "thinking".into(),
                command: None,
            }],
            ..NowView::default()
        };
        let page = now(&view, "tok").into_string();
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("1 min 1 s"));
        assert!(
            page.contains(r#"action="/admin/turns/s1/cancel""#),
            "{page}"
        );
        assert!(!page.contains("style="), "no inline style under the CSP");
    }

    #[test]
    fn skills_read_without_the_chart_and_the_chart_scales_to_the_largest() {
        let mut week = BTreeMap::new();
        let mut summary = SkillCallSummary {
            calls: 40,
            ..SkillCallSummary::default()
        };
        summary.buckets[0] = 40;
        summary.errors.insert("RATE_LIMITED".into(), 3);
        week.insert("send-reply".to_owned(), summary.clone());
        summary.calls = 10;
        week.insert("memory-save".to_owned(), summary);
        let page = skills(
            &SkillsView {
                day: BTreeMap::new(),
                week,
            },
            "tok",
        )
        .into_string();
        assert!(page.contains("<td>send-reply</td>"), "{page}");
        assert!(page.contains("RATE_LIMITED"), "{page}");
        assert!(
            page.contains(r#"width="420""#),
            "the largest bar is full: {page}"
        );
        assert!(page.contains(r#"width="105""#), "a quarter of it: {page}");
        assert!(!page.contains("style="), "no inline style under the CSP");
    }
}
