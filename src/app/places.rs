//! `air-friends places explain PLACE`: the effective settings of one place and the rule or
//! global key each comes from (`crate::places::Places::explain`), read from the configuration
//! and the skills folder as the daemon reads them.

use std::path::Path;
use std::process::ExitCode;

use crate::places::{Places, Spot};

/// Prints the settings of `place` under the configuration at `config_path`.
pub(super) fn explain_main(config_path: &Path, place: &str) -> ExitCode {
    let spot: Spot = match place.parse() {
        Ok(spot) => spot,
        Err(e) => {
            eprintln!("air-friends: {place:?} is not a place: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (_, places) = match places_of(config_path) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    print!("{}", render(&spot, &places));
    ExitCode::SUCCESS
}

/// The configuration at `config_path` and its `places:` rules, over the skills it enables, as
/// the daemon reads them; on failure the error is printed and the exit code answered.
pub(super) fn places_of(config_path: &Path) -> Result<(crate::config::Config, Places), ExitCode> {
    let (config, skills) = super::load_config_and_skills(config_path)?;
    let enabled = skills
        .names()
        .filter(|name| config.skill_enabled(name))
        .map(str::to_owned);
    let places = Places::new(&config, enabled);
    Ok((config, places))
}

/// The explanation as text: the place, then one line per setting (`key  value  (source)`).
fn render(spot: &Spot, places: &Places) -> String {
    let lines = places.explain(spot);
    let key_width = lines.iter().map(|l| l.key.len()).max().unwrap_or(0);
    let value_width = lines.iter().map(|l| l.value.len()).max().unwrap_or(0);
    let mut out = format!("place: {spot}\n");
    for line in lines {
        out.push_str(&format!(
            "{key:<key_width$}  {value:<value_width$}  ({source})\n",
            key = line.key,
            value = line.value,
            source = line.source,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_is_a_line_with_its_source() {
        let config: crate::config::Config = serde_yaml::from_str(
            "places:\n  - name: lounge\n    match: {channel: '2'}\n    reply: always\n",
        )
        .unwrap();
        let places = Places::new(&config, ["send-reply".to_owned()]);
        let text = render(&"discord/guild/1/channel/2".parse().unwrap(), &places);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "place: discord/guild/1/channel/2");
        let reply = lines.iter().find(|l| l.starts_with("reply ")).unwrap();
        assert!(reply.contains(" always "), "{reply}");
        assert!(reply.ends_with("(places.0 (lounge))"), "{reply}");
        assert_eq!(
            lines.len(),
            1 + places
                .explain(&Spot::public(crate::platform::PlatformKind::Discord))
                .len()
        );
    }
}
