//! Every role's account in one fixed-size table, and the rules that refuse a charge or a
//! limit: the one place they are written.
//!
//! The slots are plain data (`#[repr(C)]`, `Copy`, no pointers) in storage the caller
//! gives (a `Vec` in tests, shared memory sized at start-up in the SQL layer), so that
//! the table can live in shared memory under one lock: a check and the charge that
//! follows it are one step for every session.

use super::file::LEDGER_PATH;
use super::ledger::{Account, Charge, Cost, Limit, Record, DELTA, EPSILON};
use crate::error::Error;

/// One role's account.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct Slot {
    role: u32,
    has_limit: bool,
    limit: u64,
    spent: u64,
    delta_limit: u64,
    delta_spent: u64,
}

impl Slot {
    fn account(&self) -> Account {
        Account {
            limit: self.has_limit.then_some(self.limit),
            spent: self.spent,
            delta_limit: self.has_limit.then_some(self.delta_limit),
            delta_spent: self.delta_spent,
        }
    }

    fn store(&mut self, account: Account) {
        self.has_limit = account.limit.is_some();
        self.limit = account.limit.unwrap_or(0);
        self.spent = account.spent;
        self.delta_limit = account.delta_limit.unwrap_or(0);
        self.delta_spent = account.delta_spent;
    }
}

/// Why a charge or a limit was refused. [`Refusal::error`] names the role only after the
/// table's lock is released (naming it is a catalog lookup).
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The ledger could not be read at start-up: nothing is charged from a made-up zero.
    Unreadable,
    /// WAL replay met more roles than the table holds (a standby whose primary has a
    /// larger table): a role left out would look unlimited.
    Overflowed { capacity: usize },
    /// A role that is not in the table yet and no slot is left for it.
    Full { capacity: usize },
    /// pg_exp_mech.require_budget is on and the role has no limit.
    NoBudget,
    /// The charges would take the role past its ε limit.
    Exceeded {
        aggregate: String,
        epsilon: f64,
        remaining: u64,
        limit: u64,
    },
    /// The charges would take the role past its δ limit.
    DeltaExceeded {
        aggregate: String,
        delta: f64,
        remaining: u64,
        limit: u64,
    },
    /// The ledger line could not be written.
    Write { reason: String },
}

impl Refusal {
    pub fn error(self, role_name: impl FnOnce() -> String) -> Error {
        match self {
            Refusal::Unreadable => Error::BudgetsUnavailable {
                reason: format!(
                    "the privacy ledger {LEDGER_PATH} could not be read at start-up (see the server log)"
                ),
            },
            Refusal::Overflowed { capacity } => Error::BudgetsUnavailable {
                reason: format!(
                    "WAL replay met more than {capacity} roles, the size of the table of accounts; restart the server, which sizes it from the ledger (or raise pg_exp_mech.max_roles)"
                ),
            },
            Refusal::Full { capacity } => Error::TooManyRoles { capacity },
            Refusal::NoBudget => Error::NoBudget { role: role_name() },
            Refusal::Exceeded {
                aggregate,
                epsilon,
                remaining,
                limit,
            } => Error::BudgetExceeded {
                role: role_name(),
                aggregate,
                epsilon,
                remaining: EPSILON.amount(remaining),
                limit: EPSILON.amount(limit),
            },
            Refusal::DeltaExceeded {
                aggregate,
                delta,
                remaining,
                limit,
            } => Error::DeltaBudgetExceeded {
                role: role_name(),
                aggregate,
                delta,
                remaining: DELTA.amount(remaining),
                limit: DELTA.amount(limit),
            },
            Refusal::Write { reason } => Error::LedgerWrite { reason },
        }
    }
}

/// Whether the table can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
enum Health {
    Ready,
    Unreadable,
    Overflowed,
}

/// Every role's account, in the slots of `S` (as many roles as slots).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Accounts<S> {
    health: Health,
    count: u32,
    slots: S,
}

impl Accounts<Vec<Slot>> {
    /// A table of `capacity` slots on the heap.
    pub fn with_capacity(capacity: usize) -> Self {
        Accounts::new(vec![Slot::default(); capacity])
    }
}

impl<S: AsRef<[Slot]> + AsMut<[Slot]>> Accounts<S> {
    /// An empty table over `slots` (their contents are ignored).
    pub fn new(slots: S) -> Self {
        Accounts {
            health: Health::Ready,
            count: 0,
            slots,
        }
    }

    /// How many roles the table holds.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().len()
    }

    /// Fills the table from a replay of the ledger; a ledger naming more roles than the
    /// table holds leaves it unreadable (every charge refused).
    pub fn load(
        &mut self,
        accounts: impl ExactSizeIterator<Item = (u32, Account)>,
    ) -> Result<(), Refusal> {
        if accounts.len() > self.capacity() {
            self.health = Health::Unreadable;
            return Err(Refusal::Full {
                capacity: self.capacity(),
            });
        }
        for (role, account) in accounts {
            self.slot(role)?.store(account);
        }
        Ok(())
    }

    /// Refuses every charge and limit from now on (the ledger could not be read).
    pub fn mark_unreadable(&mut self) {
        self.health = Health::Unreadable;
    }

    /// Why nothing can be charged, if so.
    pub fn unavailable(&self) -> Option<Refusal> {
        match self.health {
            Health::Ready => None,
            Health::Unreadable => Some(Refusal::Unreadable),
            Health::Overflowed => Some(Refusal::Overflowed {
                capacity: self.capacity(),
            }),
        }
    }

    /// The account of `role`, if it has one.
    pub fn get(&self, role: u32) -> Option<Account> {
        self.position(role)
            .map(|at| self.slots.as_ref()[at].account())
    }

    /// Every account, by role, in the order the roles first appeared.
    pub fn iter(&self) -> impl Iterator<Item = (u32, Account)> + '_ {
        self.used().iter().map(|slot| (slot.role, slot.account()))
    }

    /// Charges `charges` (one statement's, all of one role) together, unless a rule
    /// refuses them: all are taken or none. `must_have_budget`: the role is refused
    /// without a limit (pg_exp_mech.require_budget). `write` puts the charges on the
    /// ledger first, durably when `true` is passed (the role has a limit): whatever a
    /// client may see is on disk. Nothing changes when anything fails, and a refused role
    /// takes no slot.
    pub fn charge(
        &mut self,
        charges: &[Charge],
        must_have_budget: bool,
        write: impl FnOnce(bool) -> Result<(), String>,
    ) -> Result<(), Refusal> {
        if let Some(refusal) = self.unavailable() {
            return Err(refusal);
        }
        let Some(first) = charges.first() else {
            return Ok(());
        };
        debug_assert!(charges.iter().all(|c| c.role == first.role));
        // One scan of the table (the lock is held): the slot is taken only once every
        // rule has passed.
        let found = self.position(first.role);
        let mut account =
            found.map_or_else(Account::default, |at| self.slots.as_ref()[at].account());
        if account.limit.is_none() && must_have_budget {
            return Err(Refusal::NoBudget);
        }
        let cost = charges
            .iter()
            .fold(Cost::default(), |sum, charge| sum.plus(Cost::of(charge)));
        // The refusal names the aggregate that needs the most: that is what to change.
        let name = |by: fn(&Charge) -> f64| {
            charges
                .iter()
                .max_by(|a, b| by(a).total_cmp(&by(b)))
                .map(|c| c.aggregate.clone())
                .unwrap_or_default()
        };
        if !account.allows(cost.epsilon) {
            return Err(Refusal::Exceeded {
                aggregate: name(|c| c.epsilon),
                epsilon: EPSILON.amount(cost.epsilon),
                remaining: account.remaining().unwrap_or(0),
                limit: account.limit.unwrap_or(0),
            });
        }
        if !account.allows_delta(cost.delta) {
            return Err(Refusal::DeltaExceeded {
                aggregate: name(|c| c.delta),
                delta: DELTA.amount(cost.delta),
                remaining: account.delta_remaining().unwrap_or(0),
                limit: account.delta_limit.unwrap_or(0),
            });
        }
        let at = match found {
            Some(at) => at,
            None => self.take_slot(first.role)?,
        };
        write(account.limit.is_some()).map_err(|reason| Refusal::Write { reason })?;
        for charge in charges {
            account.apply(&Record::Charge(charge.clone()));
        }
        self.slots.as_mut()[at].store(account);
        Ok(())
    }

    /// Records what a role spent elsewhere (its account moved from another cluster),
    /// whatever its limit: spending is a fact, never refused. `write` puts it on the
    /// ledger, durably, first.
    pub fn carry_over(
        &mut self,
        charge: &Charge,
        write: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), Refusal> {
        self.record(charge.role, &Record::Charge(charge.clone()), write)
    }

    /// Sets (or removes) a role's limit, keeping what it spent; `write` puts the change
    /// on the ledger (always durably) before the table changes.
    pub fn set_limit(
        &mut self,
        limit: &Limit,
        write: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), Refusal> {
        self.record(limit.role, &Record::Limit(limit.clone()), write)
    }

    /// Applies a budget administrator's record to `role`'s account (no limit applies),
    /// after `write` put it on the ledger.
    fn record(
        &mut self,
        role: u32,
        record: &Record,
        write: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), Refusal> {
        if let Some(refusal) = self.unavailable() {
            return Err(refusal);
        }
        let slot = self.slot(role)?;
        write().map_err(|reason| Refusal::Write { reason })?;
        let mut account = slot.account();
        account.apply(record);
        slot.store(account);
        Ok(())
    }

    /// Applies a record replayed from WAL: it was checked where it was written, so no
    /// rule is applied again. A role that does not fit leaves the table overflowed:
    /// every charge is refused until a restart sizes the table anew.
    pub fn replay(&mut self, record: &Record) -> Result<(), Refusal> {
        match self.slot(record.role()) {
            Ok(slot) => {
                let mut account = slot.account();
                account.apply(record);
                slot.store(account);
                Ok(())
            }
            Err(_) => {
                self.health = Health::Overflowed;
                Err(self.unavailable().expect("overflowed"))
            }
        }
    }

    fn used(&self) -> &[Slot] {
        &self.slots.as_ref()[..self.count as usize]
    }

    /// Where `role`'s slot is, if it has one.
    fn position(&self, role: u32) -> Option<usize> {
        self.used().iter().position(|slot| slot.role == role)
    }

    /// The slot of `role`, taken now if it has none.
    fn slot(&mut self, role: u32) -> Result<&mut Slot, Refusal> {
        let at = match self.position(role) {
            Some(at) => at,
            None => self.take_slot(role)?,
        };
        Ok(&mut self.slots.as_mut()[at])
    }

    /// Takes a new slot for `role`, which has none.
    fn take_slot(&mut self, role: u32) -> Result<usize, Refusal> {
        let count = self.count as usize;
        if count == self.capacity() {
            return Err(Refusal::Full {
                capacity: self.capacity(),
            });
        }
        self.count += 1;
        self.slots.as_mut()[count] = Slot {
            role,
            ..Slot::default()
        };
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ledger::Budget;

    fn charge(role: u32, epsilon: f64) -> Charge {
        Charge {
            time: 1,
            role,
            epsilon,
            delta: 0.0,
            aggregate: "dp_quantile".into(),
            statement: 7,
        }
    }

    fn limit(role: u32, limit: Option<f64>) -> Limit {
        Limit {
            time: 0,
            role,
            limit: limit.map(|epsilon| Budget {
                epsilon,
                delta: 1e-6,
            }),
        }
    }

    /// A `write` that succeeds and records whether it was asked to be durable.
    fn written(log: &mut Vec<bool>) -> impl FnOnce(bool) -> Result<(), String> + '_ {
        |durable| {
            log.push(durable);
            Ok(())
        }
    }

    #[test]
    fn a_carried_over_spend_is_kept_beyond_the_limit() {
        let mut accounts = Accounts::with_capacity(4);
        accounts
            .set_limit(&limit(10, Some(1.0)), || Ok(()))
            .unwrap();
        accounts.carry_over(&charge(10, 2.0), || Ok(())).unwrap();
        let account = accounts.get(10).unwrap();
        assert_eq!(account.spent, EPSILON.charge(2.0));
        assert_eq!(account.remaining(), Some(0));
        assert!(accounts
            .charge(&[charge(10, 0.1)], false, |_| Ok(()))
            .is_err());
        // A failed write changes nothing.
        assert!(accounts
            .carry_over(&charge(10, 1.0), || Err("disk full".into()))
            .is_err());
        assert_eq!(accounts.get(10).unwrap().spent, EPSILON.charge(2.0));
    }

    #[test]
    fn charges_within_the_limit_are_written_durably_then_applied() {
        let mut accounts = Accounts::with_capacity(4);
        let mut log = Vec::new();
        accounts
            .set_limit(&limit(10, Some(1.0)), || Ok(()))
            .unwrap();
        accounts
            .charge(&[charge(10, 0.25)], false, written(&mut log))
            .unwrap();
        accounts
            .charge(&[charge(11, 5.0)], false, written(&mut log))
            .unwrap();
        assert_eq!(log, [true, false], "durable only where a limit is at stake");
        assert_eq!(
            accounts.get(10).unwrap().remaining(),
            Some(EPSILON.limit(0.75))
        );
        assert_eq!(accounts.get(11).unwrap().limit, None);
        assert_eq!(
            accounts.iter().map(|(role, _)| role).collect::<Vec<_>>(),
            [10, 11]
        );
    }

    #[test]
    fn a_charge_past_the_limit_is_refused_and_not_written() {
        let mut accounts = Accounts::with_capacity(4);
        accounts
            .set_limit(&limit(10, Some(0.6)), || Ok(()))
            .unwrap();
        let mut log = Vec::new();
        for _ in 0..2 {
            accounts
                .charge(&[charge(10, 0.25)], false, written(&mut log))
                .unwrap();
        }
        let refusal = accounts
            .charge(&[charge(10, 0.25)], false, written(&mut log))
            .unwrap_err();
        assert_eq!(log.len(), 2, "the refused charge was not written");
        assert_eq!(
            refusal.clone().error(|| "analyst".into()).to_string(),
            "privacy budget of role \"analyst\" exceeded: dp_quantile needs epsilon 0.25, 0.1 of 0.6 remain"
        );
        assert_eq!(refusal.error(String::new).sqlstate(), "53400");
        assert_eq!(accounts.get(10).unwrap().spent, 2 * EPSILON.charge(0.25));
    }

    #[test]
    fn the_charges_of_a_statement_are_taken_together_or_not_at_all() {
        let mut accounts = Accounts::with_capacity(4);
        accounts
            .set_limit(&limit(10, Some(1.0)), || Ok(()))
            .unwrap();
        let mut log = Vec::new();
        let two = [charge(10, 0.5), charge(10, 0.5)];
        accounts.charge(&two, false, written(&mut log)).unwrap();
        assert_eq!(log, [true], "one write for the statement");
        assert_eq!(accounts.get(10).unwrap().remaining(), Some(0));
        accounts
            .set_limit(&limit(10, Some(1.5)), || Ok(()))
            .unwrap();
        let refusal = accounts
            .charge(&[charge(10, 0.25), charge(10, 0.5)], false, |_| {
                panic!("not written")
            })
            .unwrap_err();
        assert_eq!(
            refusal.error(|| "analyst".into()).to_string(),
            "privacy budget of role \"analyst\" exceeded: dp_quantile needs epsilon 0.75, 0.5 of 1.5 remain"
        );
        assert_eq!(
            accounts.get(10).unwrap().remaining(),
            Some(EPSILON.limit(0.5))
        );
    }

    #[test]
    fn delta_past_its_limit_is_refused() {
        let mut accounts = Accounts::with_capacity(4);
        accounts
            .set_limit(&limit(10, Some(100.0)), || Ok(()))
            .unwrap();
        let with_delta = |delta| Charge {
            delta,
            aggregate: "dp_partition".into(),
            ..charge(10, 0.1)
        };
        accounts
            .charge(&[with_delta(6e-7)], false, |_| Ok(()))
            .unwrap();
        let refusal = accounts
            .charge(&[with_delta(6e-7)], false, |_| panic!("not written"))
            .unwrap_err();
        let error = refusal.error(|| "analyst".into());
        assert_eq!(error.sqlstate(), "53400");
        assert_eq!(
            error.to_string(),
            "privacy budget of role \"analyst\" exceeded: dp_partition needs delta 6e-07, 4e-07 of 1e-06 remain"
        );
        let account = accounts.get(10).unwrap();
        assert_eq!(
            account.delta_remaining(),
            Some(DELTA.limit(1e-6) - 600_000_000_000)
        );
        assert_eq!(
            account.remaining(),
            Some(EPSILON.limit(100.0) - EPSILON.charge(0.1))
        );
    }

    #[test]
    fn require_budget_refuses_a_role_without_a_limit_and_spends_no_slot() {
        let mut accounts = Accounts::with_capacity(1);
        let refusal = accounts
            .charge(&[charge(10, 0.1)], true, |_| panic!("not written"))
            .unwrap_err();
        assert_eq!(refusal, Refusal::NoBudget);
        assert_eq!(
            refusal.error(|| "newcomer".into()).to_string(),
            "role \"newcomer\" has no privacy budget, and pg_exp_mech.require_budget is on"
        );
        assert_eq!(accounts.iter().count(), 0, "no slot taken");
        // With a limit the same role is charged.
        accounts
            .set_limit(&limit(10, Some(1.0)), || Ok(()))
            .unwrap();
        accounts
            .charge(&[charge(10, 0.1)], true, |_| Ok(()))
            .unwrap();
    }

    #[test]
    fn a_full_table_refuses_new_roles_only() {
        let mut accounts = Accounts::with_capacity(2);
        accounts
            .charge(&[charge(1, 0.1)], false, |_| Ok(()))
            .unwrap();
        accounts.set_limit(&limit(2, Some(1.0)), || Ok(())).unwrap();
        let full = Refusal::Full { capacity: 2 };
        assert_eq!(
            accounts.charge(&[charge(3, 0.1)], false, |_| panic!("not written")),
            Err(full.clone())
        );
        assert_eq!(
            accounts.set_limit(&limit(3, Some(1.0)), || panic!("not written")),
            Err(full.clone())
        );
        assert_eq!(
            full.error(String::new).to_string(),
            "the privacy ledger tracks at most 2 roles, and all are in use (raise pg_exp_mech.max_roles and restart)"
        );
        accounts
            .charge(&[charge(1, 0.1)], false, |_| Ok(()))
            .unwrap();
        accounts
            .charge(&[charge(2, 0.1)], false, |_| Ok(()))
            .unwrap();
    }

    #[test]
    fn an_unreadable_ledger_refuses_everything() {
        let mut accounts = Accounts::with_capacity(4);
        accounts.mark_unreadable();
        assert_eq!(accounts.unavailable(), Some(Refusal::Unreadable));
        let refusal = accounts
            .charge(&[charge(1, 0.1)], false, |_| panic!("not written"))
            .unwrap_err();
        assert_eq!(refusal, Refusal::Unreadable);
        assert_eq!(
            accounts.set_limit(&limit(1, None), || panic!("not written")),
            Err(Refusal::Unreadable)
        );
        let error = refusal.error(String::new);
        assert_eq!(error.sqlstate(), "55000");
        assert_eq!(
            error.to_string(),
            "privacy budgets cannot be enforced: the privacy ledger pg_exp_mech/ledger could not be read at start-up (see the server log)"
        );
    }

    #[test]
    fn replay_past_the_table_overflows_it_until_a_restart() {
        let mut accounts = Accounts::with_capacity(1);
        accounts.replay(&Record::Charge(charge(1, 0.5))).unwrap();
        assert_eq!(accounts.get(1).unwrap().spent, EPSILON.charge(0.5));
        let refusal = accounts
            .replay(&Record::Limit(limit(2, Some(1.0))))
            .unwrap_err();
        assert_eq!(refusal, Refusal::Overflowed { capacity: 1 });
        assert_eq!(
            accounts.charge(&[charge(1, 0.1)], false, |_| panic!("not written")),
            Err(refusal.clone())
        );
        assert_eq!(
            refusal.error(String::new).to_string(),
            "privacy budgets cannot be enforced: WAL replay met more than 1 roles, the size of the table of accounts; restart the server, which sizes it from the ledger (or raise pg_exp_mech.max_roles)"
        );
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let mut accounts = Accounts::with_capacity(4);
        accounts.set_limit(&limit(1, Some(1.0)), || Ok(())).unwrap();
        let refusal = accounts
            .charge(&[charge(1, 0.5)], false, |_| Err("disk full".into()))
            .unwrap_err();
        assert_eq!(
            refusal.clone().error(String::new).to_string(),
            "could not write the privacy ledger: disk full"
        );
        assert_eq!(accounts.get(1).unwrap().spent, 0);
        assert!(accounts
            .set_limit(&limit(1, None), || Err("disk full".into()))
            .is_err());
        assert_eq!(accounts.get(1).unwrap().limit, Some(EPSILON.limit(1.0)));
    }

    #[test]
    fn load_refuses_a_ledger_with_more_roles_than_slots() {
        let mut accounts = Accounts::with_capacity(2);
        let three = (1..=3)
            .map(|role| (role, Account::default()))
            .collect::<Vec<_>>();
        assert_eq!(
            accounts.load(three.into_iter()),
            Err(Refusal::Full { capacity: 2 })
        );
        assert_eq!(accounts.unavailable(), Some(Refusal::Unreadable));
        let mut accounts = Accounts::with_capacity(2);
        let two = [
            (
                5,
                Account {
                    limit: Some(3),
                    spent: 2,
                    delta_limit: Some(5),
                    delta_spent: 1,
                },
            ),
            (6, Account::default()),
        ];
        accounts.load(two.into_iter()).unwrap();
        assert_eq!(
            accounts.get(5),
            Some(Account {
                limit: Some(3),
                spent: 2,
                delta_limit: Some(5),
                delta_spent: 1,
            })
        );
    }
}
