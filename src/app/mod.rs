//! What each subcommand does. The daemon's components are built in `daemon` (the composition
//! root, shared by `serve` and `chat`); [`serve`] runs it, `chat` talks to it on the console.
//! The short one-shot commands are here.

mod admin_link;
mod backup;
mod chat;
mod check;
mod control;
mod daemon;
mod forget_user;
mod generate;
mod healthcheck;
mod invite;
mod places;
mod reload;
mod restore;
mod schedules;
mod serve;
mod stats;

use std::future::Future;
use std::path::Path;
use std::process::ExitCode;

pub use serve::{bind, serve, serve_main};

use crate::cli::{
    Cli, Command, DiscordCommand, ImportCommand, PlacesCommand, SchedulesCommand, SkillsCommand,
    ValidateFormat,
};
use anyhow::Context;

use crate::config::{self, Config, ProcessEnv};
use crate::observability::{LiveSecrets, LogTarget, Redactor, init_logging};

/// Runs a parsed command line; the return value is the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::PrintDefaultConfig { system } => {
            print!("{}", config::example_yaml(system));
            ExitCode::SUCCESS
        }
        Command::CheckConfig(c) => check_config(&c.config),
        Command::Setup(args) if args.print_opencode_version => {
            println!("{}", crate::setup::OPENCODE_VERSION);
            ExitCode::SUCCESS
        }
        Command::Setup(args) => crate::setup::run_cli(&crate::setup::Options {
            config: args.config.config,
            dry_run: args.dry_run,
            test_tools: args.test_tools,
            system: args.system,
        }),
        Command::WriteDefaults { dir } => match crate::shipped::write(&dir) {
            Ok(wrote) => {
                let state = if wrote {
                    "written"
                } else {
                    "already this version's"
                };
                println!(
                    "{}: {state} ({})",
                    dir.display(),
                    crate::shipped::stamp().trim()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("air-friends write-defaults: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Serve(c) => serve_main(&c.config),
        Command::Chat(c) => chat::chat_main(&c.config),
        Command::Skill { help, name, args } => skill_client(help, name.as_deref(), &args),
        Command::Backup {
            config,
            force,
            file,
        } => backup::backup_main(&config.config, &file, force),
        Command::Restore { config, file } => restore::restore_main(&config.config, &file),
        Command::Stats(config) => stats::stats_main(&config.config),
        Command::Healthcheck(config) => healthcheck::healthcheck_main(&config.config),
        Command::Reload(config) => reload::reload_main(&config.config),
        Command::ForgetUser { config, now, user } => {
            forget_user::forget_user_main(&config.config, &user, now)
        }
        Command::AdminLink { config } => admin_link::admin_link_main(&config.config),
        Command::Places {
            command: PlacesCommand::Explain { config, place },
        } => places::explain_main(&config.config, &place),
        Command::Schedules {
            command: SchedulesCommand::List { config },
        } => schedules::list_main(&config.config),
        Command::Schedules {
            command: SchedulesCommand::Run { config, name },
        } => schedules::run_main(&config.config, &name),
        Command::Discord {
            command: DiscordCommand::InviteUrl { config, client_id },
        } => invite::invite_url_main(&config.config, client_id),
        Command::Completions { shell } => generate::completions(shell),
        Command::Man { out_dir: None } => generate::man_page(),
        Command::Man { out_dir: Some(dir) } => generate::man_pages(&dir),
        Command::SandboxInit { .. } => crate::agent::relay::main_from_argv(),
        Command::Import {
            command:
                ImportCommand::Jsonl {
                    config,
                    dry_run,
                    dir,
                },
        } => import_jsonl(&config.config, &dir, dry_run),
        Command::Skills {
            command:
                SkillsCommand::Validate {
                    verbose,
                    format,
                    builtin,
                    dirs,
                },
        } => {
            let (text, code) = crate::skills::validate::run_cli(
                &dirs,
                verbose,
                format == ValidateFormat::Json,
                builtin,
            );
            print!("{text}");
            ExitCode::from(code)
        }
    }
}

/// `air-friends skill NAME ...`: client mode (see [`crate::skills::client`]). Without NAME,
/// the usage and the skills found ([`crate::skills::listing`]): on stdout with exit 0 for
/// `--help`, else on stderr with exit 2 (a usage error, as the client's own).
fn skill_client(help: bool, name: Option<&str>, args: &[String]) -> ExitCode {
    let env = crate::skills::client::ClientEnv::from_process();
    let Some(name) = name else {
        let text = crate::skills::listing::skill_help(&env);
        if help {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        eprint!("{text}");
        return ExitCode::from(2);
    };
    // clap took a `--help` right after NAME (see `crate::cli::Command::Skill`); the skill's
    // own parser answers it with the skill's flags.
    let args: Vec<String> = std::iter::once("--help".to_owned())
        .filter(|_| help)
        .chain(args.iter().cloned())
        .collect();
    let out = crate::skills::client::run(name, &args, &env);
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    ExitCode::from(out.exit_code)
}

/// `air-friends check-config`: every error and warning of [`check::check_file`] (the same
/// check `serve` runs), each on its own line on stderr; the effective configuration, secrets
/// masked, on stdout. Exit 1 on any error; warnings alone do not fail.
fn check_config(path: &Path) -> ExitCode {
    let print_warnings = |warnings: &[config::ConfigIssue]| {
        for w in warnings {
            eprintln!("  warning: {}", indent_continuation(&w.to_string()));
        }
    };
    match check::check_file(path, &ProcessEnv) {
        Ok(checked) => match config::masked_yaml(&checked.config, &ProcessEnv) {
            Ok(yaml) => {
                eprintln!("{}: configuration is valid", path.display());
                print_warnings(&checked.warnings);
                eprintln!(
                    "{}: agents' cgroup: {}",
                    path.display(),
                    crate::agent::sandbox::cgroup_survey(&checked.config.agent.sandbox)
                );
                for (key, folder, default) in
                    config::paths::shipped_keys(&checked.config, &checked.shipped)
                {
                    eprintln!(
                        "{}: {key}: {} ({})",
                        path.display(),
                        folder.display(),
                        config::paths::provenance(folder, &default, &checked.shipped)
                    );
                }
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("air-friends: cannot print the configuration: {e}");
                ExitCode::FAILURE
            }
        },
        Err(rejected) => {
            eprintln!("{}: configuration has errors:", path.display());
            for issue in rejected.error.issues() {
                eprintln!("  {}", indent_continuation(&issue));
            }
            print_warnings(&rejected.warnings);
            ExitCode::FAILURE
        }
    }
}

/// A multi-line message (the skill validator's list) indented under its first line.
fn indent_continuation(text: &str) -> String {
    text.replace('\n', "\n    ")
}

/// Logging for a one-shot command that prints its own report: human-readable, on stderr, and
/// only warnings unless the operator asked for more.
fn quiet(c: &mut Config) {
    c.logging.format = config::LogFormat::Pretty;
    if c.logging.level == "info" {
        c.logging.level = "warn".into();
    }
}

/// `air-friends import jsonl [--dry-run] DIR`: imports an AIr-Friends data tree into the
/// configured database (see [`crate::store::import`]). The summary goes to stdout, one warning
/// per skipped line to stderr. A tree that holds something but yields no memory or reminder is
/// an error (exit 1): the wrong folder or an unreadable format must not look like success.
fn import_jsonl(config_path: &Path, dir: &Path, dry_run: bool) -> ExitCode {
    let dir = dir.to_path_buf();
    run_with_config(
        config_path,
        LogTarget::Stderr,
        quiet,
        move |config, _live_tokens| async move {
            let report = if dry_run {
                crate::store::import::dry_run(&dir).await
            } else {
                let db = config.database_path();
                let store = crate::store::Store::open(&db).await?;
                let report = crate::store::import::import_tree_with_progress(
                    &store,
                    &dir,
                    &mut import_progress(),
                )
                .await;
                store.close().await?;
                report
            };
            let report = report.context("import failed")?;
            println!("{report}");
            if report.found_nothing() {
                anyhow::bail!(
                    "found no AIr-Friends memory or reminder under {} ({} lines skipped); expected \
                     the data root or its workspaces/ folder, holding \
                     <platform>/<userId>/memory.public.jsonl, memory.private.jsonl or \
                     reminders.jsonl",
                    report.root.display(),
                    report.skipped
                );
            }
            Ok(())
        },
    )
}

/// What `import jsonl` shows while it works, on stderr (stdout keeps the summary): on a
/// terminal one line rewritten after each workspace, else a line per workspace.
fn import_progress() -> impl FnMut(&crate::store::import::WorkspaceSummary, usize, usize) + Send {
    use std::io::IsTerminal as _;
    let terminal = std::io::stderr().is_terminal();
    let mut memories = 0usize;
    move |summary, done, total| {
        memories += summary.memories.imported;
        if terminal {
            let width = 30;
            let filled = width * done / total.max(1);
            eprint!(
                "\rimporting [{}{}] {done}/{total} workspaces, {memories} memories",
                "#".repeat(filled),
                " ".repeat(width - filled)
            );
            if done == total {
                eprintln!();
            }
        } else {
            eprintln!("imported {summary} ({done}/{total})");
        }
    }
}

/// Loads the configuration (then `adjust`s it), installs logging to `target`, and runs `main`
/// on a multi-threaded runtime. `main` also gets the log redactor's set of live secrets, for the
/// Skill API's session registry to publish its caller tokens into. Every failure is one line on
/// stderr and exit code 1.
fn run_with_config<A, F, Fut>(path: &Path, target: LogTarget, adjust: A, main: F) -> ExitCode
where
    A: FnOnce(&mut Config),
    F: FnOnce(Config, LiveSecrets) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    match load_config(path, ConfigCheck::File) {
        Ok((config, warnings)) => run_loaded(config, &warnings, target, adjust, main),
        Err(code) => code,
    }
}

/// How much of the configuration to check before a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigCheck {
    /// The file alone ([`config::load_file`]), as `import jsonl` loads it: it needs the
    /// database path, not an agent, prompts or skills.
    File,
    /// Everything `check-config` checks ([`check::check_file`]), so the same errors stop
    /// the command; its warnings come back to be logged once logging is up.
    Strict,
}

/// The configuration at `path` and its warnings; on errors, they are printed as one line on
/// stderr (tests/serve.rs `broken_config_exits_non_zero_with_the_key_path`) and the exit code
/// is returned.
fn load_config(
    path: &Path,
    check: ConfigCheck,
) -> Result<(Config, Vec<config::ConfigIssue>), ExitCode> {
    let loaded = match check {
        ConfigCheck::File => config::load_file(path, &ProcessEnv).map(|c| (c, Vec::new())),
        ConfigCheck::Strict => check::check_file(path, &ProcessEnv)
            .map(|c| (c.config, c.warnings))
            .map_err(|rejected| rejected.error),
    };
    loaded.map_err(|err| {
        eprintln!(
            "air-friends: invalid configuration {}: {}",
            path.display(),
            err.issues().join("; ").replace('\n', " ")
        );
        ExitCode::FAILURE
    })
}

/// The configuration at `path` and its skills folder's packages, for the one-shot commands that
/// read both (`discord invite-url`, `places explain`); a failure is printed on stderr and its
/// exit code returned.
fn load_config_and_skills(path: &Path) -> Result<(Config, crate::skills::LoadedSkills), ExitCode> {
    let config = config::load_file(path, &ProcessEnv).map_err(|e| {
        eprintln!("air-friends: {e}");
        ExitCode::FAILURE
    })?;
    let skills = crate::skills::load_skills(&config.agent.skills_dir).map_err(|e| {
        eprintln!(
            "air-friends: agent.skillsDir ({}): {e}",
            config.agent.skills_dir.display()
        );
        ExitCode::FAILURE
    })?;
    Ok((config, skills))
}

/// Without any model provider key, `agent.model` is OpenCode Zen's free model: set here, the
/// one home of the rule for a start and a reload. Returns the model when it was set.
fn keyless_default(config: &mut Config) -> Option<String> {
    let model = config.agent.keyless_default_model(&ProcessEnv)?.to_owned();
    config.agent.model = Some(model.clone());
    Some(model)
}

/// [`run_with_config`]'s second half, for a configuration already loaded: logs `warnings`
/// once logging is installed.
fn run_loaded<A, F, Fut>(
    mut config: Config,
    warnings: &[config::ConfigIssue],
    target: LogTarget,
    adjust: A,
    main: F,
) -> ExitCode
where
    A: FnOnce(&mut Config),
    F: FnOnce(Config, LiveSecrets) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    adjust(&mut config);
    let redactor = Redactor::new(config::known_secret_values(&config, &ProcessEnv));
    let live_tokens = redactor.live_secrets();
    let _guard = match init_logging(
        &config.logging,
        std::env::var("RUST_LOG").ok(),
        redactor,
        target,
    ) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("air-friends: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    for w in warnings {
        tracing::warn!(key = %w.path, problem = %w.message, "configuration warning");
    }
    if let Some(model) = keyless_default(&mut config) {
        tracing::info!(
            model,
            "no model provider key is set: using OpenCode Zen's free model"
        );
    }
    // Before any thread or secret-holding component exists: no process of our uid (an agent
    // left unconfined, a tool it started) may read our memory or /proc/<pid>/environ.
    if let Err(e) = crate::agent::sandbox::make_non_dumpable() {
        eprintln!("air-friends: cannot mark the process non-dumpable: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("air-friends: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main(config, live_tokens)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "failed");
            eprintln!("air-friends: {e:#}");
            ExitCode::FAILURE
        }
    }
}
