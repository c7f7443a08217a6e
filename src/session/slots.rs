//! Per-turn slots ([`TurnSlots`]): state a handler keeps for the current turn, owned by the
//! handler that needs it. A slot is any type implementing [`TurnSlot`], keyed by its type, so
//! a handler adds one without touching this module; the store starts empty at each turn and a
//! slot starts from its `Default` when first used. The session itself knows no slot type: it
//! only asks every slot whether it [`answered`](TurnSlot::answered) the user.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;

/// A handler's per-turn state, kept in the session's [`TurnSlots`].
pub trait TurnSlot: Default + Send + 'static {
    /// Whether this slot records something the user has received in this turn (a reply, a
    /// reaction, a file); the session has responded when any slot has.
    fn answered(&self) -> bool {
        false
    }
}

/// A stored slot, type-erased.
trait StoredSlot: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn as_any(&self) -> &dyn Any;
    fn answered(&self) -> bool;
}

impl<T: TurnSlot> StoredSlot for T {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn answered(&self) -> bool {
        TurnSlot::answered(self)
    }
}

/// The current turn's slots, one per slot type.
#[derive(Default)]
pub struct TurnSlots {
    slots: HashMap<TypeId, Box<dyn StoredSlot>>,
}

impl fmt::Debug for TurnSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnSlots")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl TurnSlots {
    /// The slot of type `T`, created from its `Default` if this turn has not used it yet.
    pub fn get_mut<T: TurnSlot>(&mut self) -> &mut T {
        self.slots
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()))
            .as_any_mut()
            .downcast_mut::<T>()
            // The entry for `TypeId::of::<T>()` only ever holds a `T` (inserted just above).
            .expect("a slot is stored under its own type id")
    }

    /// The slot of type `T` if this turn has used it (`None` reads as its `Default`).
    pub fn get<T: TurnSlot>(&self) -> Option<&T> {
        self.slots
            .get(&TypeId::of::<T>())
            .and_then(|slot| slot.as_any().downcast_ref::<T>())
    }

    /// Whether any slot records something the user has received ([`TurnSlot::answered`]).
    pub fn answered(&self) -> bool {
        self.slots.values().any(|slot| slot.answered())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Counter(u32);
    impl TurnSlot for Counter {}

    #[derive(Default)]
    struct Answer(bool);
    impl TurnSlot for Answer {
        fn answered(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn slots_are_kept_per_type_and_start_from_their_default() {
        let mut slots = TurnSlots::default();
        assert!(slots.get::<Counter>().is_none());
        slots.get_mut::<Counter>().0 += 2;
        slots.get_mut::<Counter>().0 += 1;
        assert_eq!(slots.get::<Counter>().map(|c| c.0), Some(3));
        assert!(!slots.get_mut::<Answer>().0);
    }

    #[test]
    fn the_turn_is_answered_when_any_slot_answered() {
        let mut slots = TurnSlots::default();
        slots.get_mut::<Counter>().0 = 1;
        assert!(!slots.answered());
        slots.get_mut::<Answer>().0 = true;
        assert!(slots.answered());
    }
}
