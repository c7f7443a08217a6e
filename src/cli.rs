//! Command-line interface (clap derive).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `--version`: the package version and the commit it was built from (`build.rs`; `unknown`
/// without git, e.g. from a release tarball).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("AIR_FRIENDS_COMMIT"),
    ")"
);

/// air-friends: an ACP coding agent as a chat companion on Discord and Misskey.
#[derive(Debug, Parser)]
#[command(name = "air-friends", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The configuration file option, on the subcommands that read it. (Not a global option:
/// `skill` passes every flag after its name to the skill untouched.)
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// Configuration file.
    #[arg(
        long,
        short = 'c',
        env = "AIR_FRIENDS_CONFIG",
        default_value = "./config.yaml"
    )]
    pub config: PathBuf,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: connect to the platforms and answer messages until SIGTERM/SIGINT.
    Serve(ConfigArg),
    /// Talk to the configured agent in this terminal: the full pipeline, with you as a DM
    /// partner and no chat platform. Ctrl-D ends.
    Chat(ConfigArg),
    /// Validate the configuration file and print the effective configuration (secrets
    /// masked). Exits 1 when it has errors.
    CheckConfig(ConfigArg),
    /// Print the documented default configuration (a starting point for config.yaml).
    PrintDefaultConfig {
        /// The system install's flavour (data in /var/lib/air-friends), as the package ships
        /// it in /etc/air-friends/config.yaml.
        #[arg(long)]
        system: bool,
    },
    /// Install what the daemon needs: OpenCode (the tested version, with npm, into
    /// ~/.local/share/air-friends/opencode), ripgrep and bubblewrap (apt-get, through sudo
    /// unless root), and the default configuration when there is none. Keeps what is in place.
    Setup(SetupArgs),
    /// Write the skills, prompts and agent configuration shipped in this binary to DIR (with
    /// a `.shipped` stamp naming this version): to package them, or to start your own copies
    /// (then point agent.skillsDir, prompts.dir or agent.configDir at them). A folder of an
    /// older version is replaced whole; one holding other files is refused.
    WriteDefaults {
        /// The folder (created when missing).
        dir: PathBuf,
    },
    /// Client mode, run by skill scripts: call skill NAME on the daemon's Skill API.
    /// Identity comes from SESSION_ID, SKILL_API_TOKEN and SKILL_API_URL; `--help` alone lists
    /// the skills found, `--help` after NAME lists the skill's flags.
    #[command(disable_help_flag = true)]
    Skill {
        /// Print the usage and the skills found (with NAME: the skill's flags). Declared here
        /// because the flags after NAME belong to the skill: clap sets this only for a
        /// `--help` before or right after NAME, and the client sees it again in front of the
        /// skill's flags (`src/app/mod.rs`).
        #[arg(long, short = 'h')]
        help: bool,
        /// The skill to call (e.g. send-reply).
        name: Option<String>,
        /// The skill's flags, passed through unparsed (see `air-friends skill NAME --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Import data from other tools.
    Import {
        /// What to import.
        #[command(subcommand)]
        command: ImportCommand,
    },
    /// Copy the database to FILE while the daemon runs (SQLite online backup, a consistent
    /// snapshot); prints the copy's size and schema version. Refuses an existing FILE
    /// unless --force.
    Backup {
        /// Configuration (for the database path).
        #[command(flatten)]
        config: ConfigArg,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
        /// Where to write the copy.
        file: PathBuf,
    },
    /// Put FILE, a copy made by `backup`, in place of the configured database. Checks it
    /// first (integrity, a known schema version, an air-friends database), refuses while the
    /// daemon runs on the database, and keeps the previous database aside
    /// (`{database}.before-restore-TIME`). The next start migrates an older schema.
    Restore {
        /// Configuration (for the database path).
        #[command(flatten)]
        config: ConfigArg,
        /// The backup to restore.
        file: PathBuf,
    },
    /// Print what the daemon has been doing, from its database: calls, errors by code and
    /// latency p50/p99 of every skill over the last day and week; memories and reminders by
    /// state per workspace; the model gateway's tokens per day. Runs beside a live daemon.
    Stats(ConfigArg),
    /// Ask the running daemon whether it is ready (its `/readyz` on health.host:health.port)
    /// and exit 0 when it serves (ready or degraded), 1 otherwise, with one line saying why:
    /// for container health checks and monitors.
    Healthcheck(ConfigArg),
    /// Ask the running daemon to reload its configuration (what can change live: the
    /// `places:` rules, prompts and personas; the rest is logged as needing a restart). The
    /// file is checked first and nothing is sent when it fails; the daemon is the process
    /// holding the configured database. `systemctl reload air-friends` does the same.
    Reload(ConfigArg),
    /// Erase everything kept about one user (docs/PRIVACY.md): memories with their changes,
    /// index entries and vectors, reminders, usage records, inbox messages, conversation state,
    /// and their workspace folder; prints the counts. With the daemon running it stops the
    /// user's agents first and refuses while a turn of theirs runs (unless --now); the
    /// database file is rebuilt so nothing stays in its free pages. Backups keep the data
    /// until they are rotated.
    ForgetUser {
        /// Configuration (for the database and workspace paths).
        #[command(flatten)]
        config: ConfigArg,
        /// Stop a running turn of theirs first instead of refusing.
        #[arg(long)]
        now: bool,
        /// The user: PLATFORM/USER-ID, e.g. discord/123456789012345678 or misskey/9abcdefghi.
        user: String,
    },
    /// Print a one-time login link for the operator console (docs/CONSOLE.md): the running
    /// daemon mints it (admin.enabled must be on); it works once, for admin.linkMinutes.
    AdminLink {
        /// Configuration (for the database, beside which the daemon's control socket is).
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Inspect the `places:` rules (docs/PLACES.md).
    Places {
        /// What to do.
        #[command(subcommand)]
        command: PlacesCommand,
    },
    /// Operator schedules: posts the bot makes on its own (docs/SCHEDULES.md).
    Schedules {
        /// What to do.
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// Discord helpers.
    Discord {
        /// What to do.
        #[command(subcommand)]
        command: DiscordCommand,
    },
    /// Print a shell completion script to stdout (e.g. `air-friends completions bash >
    /// ~/.local/share/bash-completion/completions/air-friends`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout (e.g. `air-friends man > air-friends.1`), or, with
    /// --out-dir, write it and one page per subcommand (air-friends-serve.1, ...) there.
    Man {
        /// Write every page into this folder instead of printing the top-level one.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Tools for skill packages.
    Skills {
        /// What to do.
        #[command(subcommand)]
        command: SkillsCommand,
    },
    /// Internal, run by the agent sandbox: relay loopback TCP to Unix sockets while running a
    /// program (`sandbox-init --relay ADDR=SOCKET... -- PROGRAM ARGS...`, see
    /// `src/agent/relay.rs`). Needs no configuration file.
    #[command(hide = true, disable_help_flag = true)]
    SandboxInit {
        /// `--relay ADDR=SOCKET`..., `--`, the program and its arguments. Declared only: the
        /// relay parses its raw argv itself (clap drops a leading `--`), so every error is one
        /// line and exit code 1.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<OsString>,
    },
}

/// `air-friends setup` options (see `src/setup.rs`).
#[derive(Debug, Clone, clap::Args)]
pub struct SetupArgs {
    /// Where to write the default configuration if it does not exist.
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print what is in place and what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also install what only the tests need (promtool, from the Debian package `prometheus`,
    /// and `chromium` with `chromium-driver` for the console's browser tests).
    #[arg(long)]
    pub test_tools: bool,
    /// Install for the systemd service, as root: OpenCode into /usr/lib/air-friends/opencode,
    /// the shipped defaults into /usr/share/air-friends (unless the package's are this
    /// version's), the configuration /etc/air-friends/config.yaml, and the air-friends user.
    #[arg(long)]
    pub system: bool,
    /// Print the OpenCode version setup installs (the tested one) and exit.
    #[arg(long, exclusive = true)]
    pub print_opencode_version: bool,
}

/// `air-friends places` subcommands.
#[derive(Debug, Subcommand)]
pub enum PlacesCommand {
    /// Print the effective settings of a place (reply policy, persona, model, skills, memory,
    /// budget, attachments, warm agents) and the rule or global key each comes from.
    Explain {
        /// Configuration.
        #[command(flatten)]
        config: ConfigArg,
        /// The place: the platform, then any of `dm`, `guild/ID`, `category/ID`, `parent/ID`
        /// (a thread's channel or forum), `channel/ID` (on Misskey: the note's channel), e.g.
        /// `discord/guild/1/channel/2`, `discord/dm`, `misskey/channel/abc`.
        #[arg(value_name = "PLATFORM/IDS")]
        place: String,
    },
}

/// `air-friends schedules` subcommands.
#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Print each schedule: its timetable, place, prompt file and next three runs (in its time
    /// zone and in UTC).
    List {
        /// Configuration.
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Run a schedule now, outside its timetable, through the running daemon (its control
    /// socket), and print how the run ended.
    Run {
        /// Configuration (for the database, whose control socket the daemon serves).
        #[command(flatten)]
        config: ConfigArg,
        /// The schedule's name.
        name: String,
    },
}

/// `air-friends discord` subcommands.
#[derive(Debug, Subcommand)]
pub enum DiscordCommand {
    /// Print the URL that invites the bot to a server, with exactly the scopes and permissions
    /// the enabled skills use (docs/PLATFORMS.md). The application id is read from the bot
    /// token unless --client-id is given.
    InviteUrl {
        /// Configuration (the token and the skills).
        #[command(flatten)]
        config: ConfigArg,
        /// The application (client) id, when the token is not at hand.
        #[arg(long, value_name = "ID")]
        client_id: Option<u64>,
    },
}

/// `air-friends skills` subcommands.
#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Validate skill packages (SKILL.md, manifest.json, entrypoint, docs versus contract).
    /// Exits 0 when every skill passes (warnings allowed), 1 otherwise.
    Validate {
        /// Show every check, also for skills that pass.
        #[arg(long)]
        verbose: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: ValidateFormat,
        /// Also compare each built-in skill's input_schema with the one the daemon accepts.
        #[arg(long)]
        builtin: bool,
        /// Skill directories or directories of skills (default: ./skills).
        dirs: Vec<PathBuf>,
    },
}

/// Output format of `skills validate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ValidateFormat {
    /// ✓/✗ check chains with fix hints.
    Text,
    /// One JSON document.
    Json,
}

/// `air-friends import` subcommands.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Import an AIr-Friends data folder (`workspaces/<platform>/<userId>/memory.public.jsonl`,
    /// `memory.private.jsonl`, `reminders.jsonl`) into the configured database and print a
    /// summary per workspace. Idempotent: running it again adds nothing. Exits 1 when the folder
    /// is not empty but holds no memory or reminder it can read.
    Jsonl {
        /// Configuration (for the database path).
        #[command(flatten)]
        config: ConfigArg,
        /// Parse and report only: open no database, write nothing.
        #[arg(long)]
        dry_run: bool,
        /// The AIr-Friends data root, or its `workspaces/` folder.
        dir: PathBuf,
    },
}
