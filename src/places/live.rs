//! The `places:` rules in force. A reload (SIGHUP, `air-friends reload`) replaces them whole:
//! each reader takes the current rules when it decides ([`LivePlaces::current`]) — the answer
//! policy when a message arrives, the interaction when its turn begins — and a turn keeps the
//! place it began with to its end, so one turn never mixes the old rules and the new.

use std::sync::{Arc, RwLock};

use super::Places;
use crate::sync::RecoverRw;

/// The rules in force, shared by the answer policy, the interactions and the user commands.
#[derive(Debug)]
pub struct LivePlaces {
    current: RwLock<Arc<Places>>,
}

impl LivePlaces {
    /// Starts with `places`.
    pub fn new(places: Places) -> Self {
        Self {
            current: RwLock::new(Arc::new(places)),
        }
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<Places> {
        self.current.read_locked().clone()
    }

    /// Puts `places` in force for every message read from now on.
    pub fn replace(&self, places: Places) {
        *self.current.write_locked() = Arc::new(places);
    }
}

impl From<Places> for LivePlaces {
    fn from(places: Places) -> Self {
        Self::new(places)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::places::Spot;

    #[test]
    fn a_snapshot_keeps_its_rules_after_a_replacement() {
        let live = LivePlaces::new(Places::none());
        let before = live.current();
        let config: Config =
            serde_yaml::from_str("places:\n  - {name: lounge, match: {dm: true}}\n").unwrap();
        live.replace(Places::new(&config, []));
        let dm: Spot = "discord/dm".parse().unwrap();
        assert_eq!(&*before.resolve(&dm).name, "default");
        assert_eq!(&*live.current().resolve(&dm).name, "lounge");
    }
}
