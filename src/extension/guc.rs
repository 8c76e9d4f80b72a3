//! Settings (GUCs) of pg_exp_mech.

use crate::error::Error;
use crate::mechanisms::quantile::DEFAULT_GRID_SIZE;
use crate::mechanisms::rng::Seeding;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use std::cell::Cell;
use std::ffi::c_void;

/// -1: seed from the operating system.
const NO_SEED: i32 = -1;

static SEED: GucSetting<i32> = GucSetting::<i32>::new(NO_SEED);

static REQUIRE_BUDGET: GucSetting<bool> = GucSetting::<bool>::new(false);
static MAX_ROLES: GucSetting<i32> = GucSetting::<i32>::new(4096);
static LEDGER_SNAPSHOT_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(100_000);
/// In kB: 64 MB, about 1.2 million charges.
static LEDGER_ROTATION_SIZE: GucSetting<i32> = GucSetting::<i32>::new(64 * 1024);

/// L: how many groups of one GROUP BY a privacy unit may contribute to (BigQuery's
/// `max_groups_contributed`, default 1).
static MAX_GROUPS_PER_UNIT: GucSetting<i32> = GucSetting::<i32>::new(1);
/// m: how many values of one group a privacy unit may give a quantile.
static MAX_VALUES_PER_UNIT: GucSetting<i32> = GucSetting::<i32>::new(1);
/// Δ0: how many items of one group a privacy unit may give dp_top_k_unknown_domain. It
/// costs the threshold τ·ln(Δ0), not ε, so the default keeps most of a unit's items.
static MAX_ITEMS_PER_UNIT: GucSetting<i32> = GucSetting::<i32>::new(100);

static QUANTILE_GRID_SIZE: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_GRID_SIZE as i32);

/// How dp_argmax samples its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PostgresGucEnum)]
pub enum ArgmaxMechanism {
    /// The exponential mechanism, sampled by Gumbel-max.
    #[name = c"exponential"]
    Exponential,
    /// Permute-and-flip (McKenna and Sheldon 2020), sampled by report-noisy-max with
    /// exponential noise.
    #[name = c"permute_and_flip"]
    PermuteAndFlip,
}

static ARGMAX_MECHANISM: GucSetting<ArgmaxMechanism> =
    GucSetting::<ArgmaxMechanism>::new(ArgmaxMechanism::Exponential);

/// How dp_quantiles divides ε over its quantiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PostgresGucEnum)]
pub enum QuantilesMethod {
    /// Recursive splitting (Kaplan, Schnapp and Stemmer 2022): ε/⌈log₂(m + 1)⌉ per level.
    #[name = c"recursive"]
    Recursive,
    /// ε/m for each quantile, each on all values.
    #[name = c"split"]
    Split,
}

static QUANTILES_METHOD: GucSetting<QuantilesMethod> =
    GucSetting::<QuantilesMethod>::new(QuantilesMethod::Recursive);

thread_local! {
    /// Counts assignments to the seed, so that `SET pg_exp_mech.seed = 42` restarts the
    /// stream even when the seed already was 42.
    static SEED_GENERATION: Cell<u64> = const { Cell::new(0) };
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn seed_assigned(_new_value: i32, _extra: *mut c_void) {
    SEED_GENERATION.with(|g| g.set(g.get() + 1));
}

pub fn register() {
    // PGC_SUSET: a role that can choose the seed can predict, and subtract, the noise
    // (../shared/PRIVACY.md, section 7). SUPERUSER_ONLY also hides its value from other
    // roles.
    // SAFETY: called from _PG_init, single-threaded, with a setting and hooks that live
    // as long as the library (statics).
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            c"pg_exp_mech.seed",
            c"Fixed seed of the noise generator, for reproducible tests (-1: operating system entropy).",
            c"Superuser only. With a fixed seed every answer is predictable: never set it where analysts run queries.",
            &SEED,
            NO_SEED,
            i32::MAX,
            GucContext::Suset,
            GucFlags::SUPERUSER_ONLY,
            None,
            Some(seed_assigned),
            None,
        );
    }
    // Off by default: installing the extension must not lock out every role until a DBA
    // has handed out budgets. A DBA who gives analysts DP-only views turns it on, so that
    // a new role without a budget cannot query them unmetered.
    GucRegistry::define_bool_guc(
        c"pg_exp_mech.require_budget",
        c"Refuse differentially private aggregates to roles without a privacy budget.",
        c"Superuser only. Budgets are set with dp_budget_set and need pg_exp_mech in shared_preload_libraries.",
        &REQUIRE_BUDGET,
        GucContext::Suset,
        GucFlags::default(),
    );
    // Start-up reads the snapshot and at most about this many ledger lines after it.
    GucRegistry::define_int_guc(
        c"pg_exp_mech.ledger_snapshot_interval",
        c"Ledger lines between two snapshots of the privacy accounts.",
        c"Start-up reads the last snapshot and the lines after it. The ledger file keeps every line for dp_ledger.",
        &LEDGER_SNAPSHOT_INTERVAL,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // The ledger file is archived once a snapshot covers it and it has reached this size.
    GucRegistry::define_int_guc(
        c"pg_exp_mech.ledger_rotation_size",
        c"Size at which the privacy ledger file is archived and a new one started (-1: never).",
        c"Checked when a snapshot is written (pg_exp_mech.ledger_snapshot_interval): a file of this size or more becomes pg_exp_mech/ledger.<LSN>, kept until dp_ledger_drop_archives removes it. dp_ledger reads the archives too.",
        &LEDGER_ROTATION_SIZE,
        -1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_KB,
    );
    // The settings the aggregates read (below) may not change while a plan with DP
    // aggregates runs: its groups would read different values, and what a later group
    // does (or fails to do) would tell whether it holds rows (issue 19, part 3).
    // SAFETY: called from _PG_init, single-threaded, with settings and a hook that live
    // as long as the library (statics); the hook is guarded.
    unsafe {
        // Both mechanisms are ε-DP at the same ε: any role may choose.
        GucRegistry::define_enum_guc_with_hooks(
            c"pg_exp_mech.argmax_mechanism",
            c"How dp_argmax samples its answer: exponential (Gumbel-max, the default) or permute_and_flip.",
            c"permute_and_flip is never less accurate than the exponential mechanism at the same epsilon and up to twice as accurate; both are epsilon-DP (permute-and-flip is not bounded range, which matters only under zCDP composition).",
            &ARGMAX_MECHANISM,
            GucContext::Userset,
            GucFlags::default(),
            Some(may_change),
            None,
            None,
        );
        // Both methods are ε-DP at the same ε: any role may choose.
        GucRegistry::define_enum_guc_with_hooks(
            c"pg_exp_mech.quantiles_method",
            c"How dp_quantiles divides epsilon over its m quantiles: recursive (the default) or split.",
            c"recursive: recursive splitting (Kaplan, Schnapp and Stemmer 2022), epsilon/ceil(log2(m + 1)) per level, each value in one subproblem per level. split: epsilon/m per quantile, each on all values.",
            &QUANTILES_METHOD,
            GucContext::Userset,
            GucFlags::default(),
            Some(may_change),
            None,
            None,
        );
        // The grid is public: any size is as private as any other; it sets the
        // resolution of the answers ((hi − lo)/K) and the largest state (K + 1 counters
        // of 8 bytes).
        GucRegistry::define_int_guc_with_hooks(
            c"pg_exp_mech.quantile_grid_size",
            c"K, the number of steps of the public grid of dp_quantile candidates (K + 1 points).",
            c"The answers of dp_quantile are lo + j*(hi - lo)/K. The state of one group is at most K + 1 counters.",
            &QUANTILE_GRID_SIZE,
            1,
            1 << 24,
            GucContext::Userset,
            GucFlags::default(),
            Some(may_change),
            None,
            None,
        );
        // Privacy holds at every value (each group runs at epsilon/L, each quantile
        // value counts 1/m): any role may choose; only accuracy changes.
        GucRegistry::define_int_guc_with_hooks(
            c"pg_exp_mech.max_groups_per_unit",
            c"L: how many groups of one GROUP BY a privacy unit contributes to (chosen at random per unit); each group runs at epsilon/L.",
            c"Applies to DP aggregates over tables with a privacy unit (SECURITY LABEL FOR pg_exp_mech ... IS 'privacy_unit'). The statement is charged its epsilon whatever L is.",
            &MAX_GROUPS_PER_UNIT,
            1,
            1 << 20,
            GucContext::Userset,
            GucFlags::default(),
            Some(may_change),
            None,
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"pg_exp_mech.max_values_per_unit",
            c"m: how many values (a uniform sample) a privacy unit gives each group of dp_quantile and dp_quantiles; the temperature grows with m.",
            c"Applies to quantiles over tables with a privacy unit. Each group's quantile runs at epsilon/(L*m).",
            &MAX_VALUES_PER_UNIT,
            1,
            1 << 20,
            GucContext::Userset,
            GucFlags::default(),
            Some(may_change),
            None,
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"pg_exp_mech.max_items_per_unit",
            c"How many items (chosen at random per unit) a privacy unit gives each group of dp_top_k_unknown_domain; its threshold rises by ln of it times the temperature.",
            c"Applies to dp_top_k_unknown_domain over tables with a privacy unit: each group's delta is divided by it (Durfee and Rogers's limited-domain analysis with a union bound over the unit's items).",
            &MAX_ITEMS_PER_UNIT,
            1,
            1 << 20,
            GucContext::Userset,
            GucFlags::default(),
            Some(may_change),
            None,
            None,
        );
    }
}

/// Check hook of the settings the aggregates read: refused while a plan with DP
/// aggregates runs in this process (SET, set_config, a function's SET clause).
/// Restoring a value at the end of a transaction or function calls no check hook.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn may_change(
    _new_value: *mut std::ffi::c_int,
    _extra: *mut *mut c_void,
    _source: pgrx::pg_sys::GucSource::Type,
) -> bool {
    if !crate::extension::budget::dp_plan_running() {
        return true;
    }
    let error = Error::SettingFixed;
    let detail = std::ffi::CString::new(error.to_string()).expect("no NUL in a message");
    // SAFETY: PostgreSQL reads (and frees) the detail after the hook returns false; it is
    // copied into the current memory context, as GUC_check_errdetail does.
    unsafe {
        pgrx::pg_sys::GUC_check_errcode(error.sqlstate_code());
        pgrx::pg_sys::GUC_check_errdetail_string = pgrx::pg_sys::pstrdup(detail.as_ptr());
    }
    false
}

/// Whether roles without a budget are refused.
pub fn require_budget() -> bool {
    REQUIRE_BUDGET.get()
}

/// The settings of a preloaded library (a server-start setting can be defined only
/// then); called from _PG_init while preloading.
pub fn register_preloaded() {
    // Shared memory is sized once, at server start.
    GucRegistry::define_int_guc(
        c"pg_exp_mech.max_roles",
        c"How many roles the shared table of privacy accounts holds (at least twice the roles in the ledger).",
        c"Sized at server start: max(this, 2 x the roles the ledger names). Each role takes 40 bytes of shared memory.",
        &MAX_ROLES,
        16,
        1 << 24,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// The least number of roles the shared accounts hold.
pub fn max_roles() -> usize {
    MAX_ROLES.get() as usize
}

/// Ledger lines between two snapshots of the accounts.
pub fn ledger_snapshot_interval() -> u64 {
    LEDGER_SNAPSHOT_INTERVAL.get() as u64
}

/// The ledger file's size, in bytes, from which it is archived (None: never).
pub fn ledger_rotation_size() -> Option<u64> {
    u64::try_from(LEDGER_ROTATION_SIZE.get())
        .ok()
        .map(|kb| kb * 1024)
}

/// How dp_quantiles divides ε.
pub fn quantiles_method() -> QuantilesMethod {
    QUANTILES_METHOD.get()
}

/// How dp_argmax samples its answer.
pub fn argmax_mechanism() -> ArgmaxMechanism {
    ARGMAX_MECHANISM.get()
}

/// L: groups of one GROUP BY a privacy unit contributes to.
pub fn max_groups_per_unit() -> i64 {
    MAX_GROUPS_PER_UNIT.get() as i64
}

/// m: values a privacy unit gives one group of a quantile.
pub fn max_values_per_unit() -> i64 {
    MAX_VALUES_PER_UNIT.get() as i64
}

/// Δ0: items a privacy unit gives one group of dp_top_k_unknown_domain.
pub fn max_items_per_unit() -> i64 {
    MAX_ITEMS_PER_UNIT.get() as i64
}

/// K of the quantile grid.
pub fn quantile_grid_size() -> u32 {
    QUANTILE_GRID_SIZE.get() as u32
}

/// Where the noise generator takes its seed from now.
pub fn seeding() -> Seeding {
    match SEED.get() {
        NO_SEED => Seeding::Os,
        seed => Seeding::Fixed {
            seed: seed as u64,
            generation: SEED_GENERATION.with(Cell::get),
        },
    }
}

/// Runs `step` with PostgreSQL's setting `name` at `value`, as a function's SET clause
/// does: in a nest level of the settings, popped when `step` returns; an error leaves the
/// level to the (sub)transaction's abort, which pops it.
///
/// # Safety
/// A transaction must be open; `name` must be a setting the session may change.
pub unsafe fn with_setting<T>(
    name: &std::ffi::CStr,
    value: &std::ffi::CStr,
    step: impl FnOnce() -> T,
) -> T {
    // SAFETY: as the caller guarantees.
    unsafe {
        let level = pgrx::pg_sys::NewGUCNestLevel();
        pgrx::pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pgrx::pg_sys::GucContext::PGC_USERSET,
            pgrx::pg_sys::GucSource::PGC_S_SESSION,
            pgrx::pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        let result = step();
        pgrx::pg_sys::AtEOXact_GUC(true, level);
        result
    }
}
