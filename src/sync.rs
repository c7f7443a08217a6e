//! The crate's one policy for a poisoned lock: carry on with the data. A `std::sync` lock is
//! poisoned when a thread panicked while holding it; every lock in this crate guards data that
//! stays consistent between statements (maps, counters, caches: no multi-step invariant is
//! half-done across a panic point), so refusing all later work would turn one panic into an
//! outage. Locks are short and never held across an `.await`.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`] under the crate's policy.
pub trait Recover<T: ?Sized> {
    /// The guard, recovering the data of a poisoned lock.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Recover<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock`] reads and writes under the crate's policy.
pub trait RecoverRw<T: ?Sized> {
    /// A read guard, recovering the data of a poisoned lock.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// A write guard, recovering the data of a poisoned lock.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RecoverRw<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`Recover::locked`] as a function, for call sites that read better that way.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.locked()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let m = Arc::new(Mutex::new(1));
        let rw = Arc::new(RwLock::new(2));
        let (m2, rw2) = (m.clone(), rw.clone());
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            let _w = rw2.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(m.is_poisoned() && rw.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*lock(&m), 2);
        *rw.write_locked() += 1;
        assert_eq!(*rw.read_locked(), 3);
    }
}
