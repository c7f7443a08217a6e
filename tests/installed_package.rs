//! The Debian package as an operator gets it. `.ci/run` builds it (`contrib/package/build`),
//! installs it with `apt-get install ./air-friends_*.deb`, runs `air-friends setup --system`,
//! then these tests (ignored by a plain `cargo test`: they need root and the installed package,
//! and change `/etc/air-friends/config.yaml` while they run), then purges it.
//!
//! They run the installed `/usr/bin/air-friends` as the `air-friends` user from `/`, as the
//! systemd unit does: `check-config` on the package's own configuration, and `serve` connected
//! to the fake Discord answering a message through the fake agent in the real sandbox, with the
//! shipped skills from `/usr/share/air-friends` and the token from a systemd credential.
//!
//! Run by hand: `contrib/package/build --profile dev && apt-get install -y
//! ./target/debian/air-friends_*.deb && air-friends setup --system && cargo test --test
//! installed_package -- --ignored --test-threads=1`.

mod common;

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::json;

use common::Daemon;
use common::fake_discord::{BOT_ID, DM_CHANNEL_ID, FakeDiscord, USER_ID, message_create, user};
use common::poll::poll;
use common::serve_discord::WAIT;

const BIN: &str = "/usr/bin/air-friends";
const CONFIG: &str = "/etc/air-friends/config.yaml";
const SHARE: &str = "/usr/share/air-friends";
const DATA: &str = "/var/lib/air-friends";
const UNIT: &str = "/lib/systemd/system/air-friends.service";
const TOKEN: &str = "INSTALLED-PACKAGE-TOKEN-k2Wq9";

/// The package must be installed: these tests say so rather than pass without it.
fn require_package() {
    assert!(
        Path::new(BIN).is_file() && Path::new(UNIT).is_file(),
        "the package is not installed: see this file's header"
    );
}

/// `air-friends ARGS` as the service runs it: the `air-friends` user, from `/`, with the
/// environment systemd gives a `User=` service (PATH, HOME) plus `env`.
fn as_service(args: &[&str], env: &[(&str, &Path)]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=air-friends",
        "--regid=air-friends",
        "--init-groups",
        "--",
        BIN,
    ])
    .args(args)
    .current_dir("/")
    .env_clear()
    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
    .env("HOME", DATA);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn user_exists(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .any(|l| l.split(':').next() == Some(name))
}

#[test]
#[ignore = "needs root and the installed package (.ci/run)"]
fn the_package_installs_a_service_that_passes_its_own_checks() {
    require_package();
    assert!(user_exists("air-friends") && user_exists("air-friends-agent"));
    let config = std::fs::metadata(CONFIG).unwrap();
    assert_eq!(
        config.permissions().mode() & 0o777,
        0o640,
        "{CONFIG}'s mode"
    );
    let group = nix::unistd::Group::from_gid(config.gid().into())
        .unwrap()
        .unwrap();
    assert_eq!(group.name, "air-friends");
    let data = std::fs::metadata(DATA).unwrap();
    let owner = nix::unistd::User::from_uid(data.uid().into())
        .unwrap()
        .unwrap();
    assert_eq!(owner.name, "air-friends", "{DATA}'s owner");

    // The shipped defaults in /usr/share are exactly what the binary carries.
    let written = tempfile::tempdir().unwrap();
    let copy = written.path().join("defaults");
    let out = Command::new(BIN)
        .arg("write-defaults")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(&copy)
        .arg(SHARE)
        .output()
        .unwrap();
    assert!(diff.status.success(), "{}", text(&diff));
    for script in std::fs::read_dir(Path::new(SHARE).join("skills")).unwrap() {
        let dir = script.unwrap().path();
        let name = dir.file_name().unwrap().to_owned();
        let program = dir.join("scripts").join(&name);
        let mode = std::fs::metadata(&program).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{}", program.display());
    }

    // check-config on the package's configuration, as the service: valid, with the package's
    // shipped folders and the data in /var/lib.
    let out = as_service(&["check-config", "--config", CONFIG], &[])
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "agent.skillsDir: {SHARE}/skills (shipped with air-friends (the package's folder))"
        )),
        "{said}"
    );
    assert!(said.contains(&format!("repoPath: {DATA}")), "{said}");

    // The installed unit is valid for systemd.
    let out = Command::new("systemd-analyze")
        .args(["verify", UNIT])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// Puts a test configuration in place of the package's for the test's length.
struct ConfigSwap {
    original: Vec<u8>,
}

impl ConfigSwap {
    fn put(text: &str) -> ConfigSwap {
        let original = std::fs::read(CONFIG).unwrap();
        std::fs::write(CONFIG, text).unwrap();
        ConfigSwap { original }
    }
}

impl Drop for ConfigSwap {
    fn drop(&mut self) {
        let _ = std::fs::write(CONFIG, &self.original);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the installed package (.ci/run)"]
async fn the_installed_service_answers_on_discord_through_the_agent() {
    require_package();
    let fake = FakeDiscord::start().await;
    // The fake agent, its script and the reply text, where the service user may read them.
    let files = tempfile::tempdir().unwrap();
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = files.path().join("fake_acp_agent");
    std::fs::copy(common::fake_agent(), &agent).unwrap();
    std::fs::write(
        files.path().join("reply.md"),
        "Hello from the installed air-friends.",
    )
    .unwrap();
    let send_reply = format!("{SHARE}/skills/send-reply/scripts/send-reply");
    let script = json!({"turns": [{"steps": [
        {"run": format!("cp '{}' \"$TMPDIR/$SESSION_ID/reply.md\"", files.path().join("reply.md").display())},
        {"permission": format!("{send_reply} --message-file $TMPDIR/$SESSION_ID/reply.md")},
    ], "stopReason": "end_turn"}]});
    let script_path = files.path().join("agent.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    // The token as a systemd credential (LoadCredential=), readable by the service only.
    let credentials = tempfile::tempdir().unwrap();
    std::fs::write(credentials.path().join("DISCORD_TOKEN"), TOKEN).unwrap();
    let owner = nix::unistd::User::from_name("air-friends")
        .unwrap()
        .unwrap();
    for path in [
        credentials.path().to_path_buf(),
        credentials.path().join("DISCORD_TOKEN"),
    ] {
        std::os::unix::fs::chown(&path, Some(owner.uid.into()), Some(owner.gid.into())).unwrap();
    }

    let _config = ConfigSwap::put(&format!(
        "platforms:\n  discord:\n    enabled: true\n    apiBaseUrl: {api}\n    gatewayUrl: {gateway}\n\
         agent:\n  command: {agent}\n  args: []\n  sandbox:\n    mode: bwrap\n    readOnlyPaths: ['{files}']\n  env:\n    FAKE_ACP_SCRIPT: {script}\n\
         workspace:\n  repoPath: {DATA}\nhealth:\n  port: 0\nskillApi:\n  port: 0\nlogging:\n  level: info\n",
        api = fake.api_base_url(),
        gateway = fake.gateway_url(),
        agent = agent.display(),
        files = files.path().display(),
        script = script_path.display(),
    ));
    let credentials_dir = credentials.path().to_path_buf();
    let mut daemon = Daemon::spawn(as_service(
        &["serve", "--config", CONFIG],
        &[("CREDENTIALS_DIRECTORY", credentials_dir.as_path())],
    ));
    tokio::task::block_in_place(|| {
        daemon.wait_for_log(WAIT, |v| v["message"] == "air-friends ready")
    });

    // An id of its own: the inbox answers a message id at most once, and the data folder
    // outlives the package (a machine that ran this test before still has its database).
    let id = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        << 22)
        .to_string();
    fake.push_message(message_create(
        &id,
        DM_CHANNEL_ID,
        None,
        user(USER_ID, "alice", false),
        "hello, installed bot",
    ));
    let answered = poll(WAIT, || {
        fake.messages(DM_CHANNEL_ID)
            .iter()
            .any(|m| m.author_id == BOT_ID && m.content == "Hello from the installed air-friends.")
            .then_some(())
    })
    .await;
    if answered.is_none() {
        // Fails with every log line the daemon wrote and its stderr.
        tokio::task::block_in_place(|| daemon.wait_for_log(Duration::from_secs(2), |_| false));
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = tokio::task::block_in_place(|| daemon.child.wait()).unwrap();
    assert!(status.success(), "serve exited with {status}");
    // Nothing the daemon wrote names the token.
    assert!(
        !daemon.seen.iter().any(|l| l.contains(TOKEN)),
        "the token reached the log"
    );
    let db: PathBuf = Path::new(DATA).join("air-friends.db");
    assert_eq!(
        nix::unistd::User::from_uid(std::fs::metadata(&db).unwrap().uid().into())
            .unwrap()
            .unwrap()
            .name,
        "air-friends"
    );
}
