//! A shared plan of injected failures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The call returns its error.
    Fail,
    /// The call panics.
    Panic,
}

#[derive(Debug, Default)]
struct Plan {
    /// call name -> (fault, calls to let through first, times left to fire)
    faults: HashMap<String, (Fault, u32, Option<u32>)>,
    calls: Vec<String>,
}

/// Which calls fail or panic, and the log of every call made. Clones share
/// one plan.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    plan: Arc<Mutex<Plan>>,
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Plan> {
        // A panic injected on purpose can poison the lock; the plan stays valid.
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes every later call named `call` end with `fault`.
    pub fn set(&self, call: &str, fault: Fault) {
        self.lock().faults.insert(call.to_owned(), (fault, 0, None));
    }

    /// Makes call `call` end with `fault` after letting `skip` calls through,
    /// `times` times (then it works again).
    pub fn set_after(&self, call: &str, fault: Fault, skip: u32, times: u32) {
        self.lock()
            .faults
            .insert(call.to_owned(), (fault, skip, Some(times)));
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.lock().faults.clear();
    }

    /// Every call made so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// How many times `call` was made.
    pub fn count(&self, call: &str) -> usize {
        self.lock().calls.iter().filter(|c| *c == call).count()
    }

    /// Records a call and returns the fault it should end with, if any.
    /// Panics here when the plan says so, after releasing the lock.
    pub fn hit(&self, call: &str) -> Option<Fault> {
        let fault = {
            let mut plan = self.lock();
            plan.calls.push(call.to_owned());
            match plan.faults.get_mut(call) {
                None => None,
                Some((_, skip, _)) if *skip > 0 => {
                    *skip -= 1;
                    None
                }
                Some((fault, _, times)) => {
                    let fault = *fault;
                    match times {
                        Some(0) => None,
                        Some(n) => {
                            *n -= 1;
                            Some(fault)
                        }
                        None => Some(fault),
                    }
                }
            }
        };
        if fault == Some(Fault::Panic) {
            panic!("injected panic in {call}");
        }
        fault
    }
}
