//! pg_exp_mech: differentially private selection (the exponential mechanism, sampled by
//! Gumbel-max) as PostgreSQL aggregates.
//!
//! Layout: [`mechanisms`], [`budget`], [`parameters`] and [`error`] are plain Rust with no
//! database types; `extension` is the thin SQL layer over them (aggregates, settings,
//! budgets in shared memory).

use pgrx::prelude::*;

pgrx::pg_module_magic!(name, version);

pub mod budget;
pub mod error;
mod extension;
pub mod mechanisms;
pub mod parameters;
#[cfg(any(test, feature = "pg_test"))]
pub mod testing;

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    if cfg!(feature = "bench_floor") {
        pgrx::warning!(
            "pg_exp_mech is make bench-profile's floor build (feature bench_floor): \
             dp_quantile and dp_quantiles ignore their rows"
        );
    }
    extension::guc::register();
    // Budgets live in shared memory, which only a preloaded library can reserve.
    // SAFETY: a flag PostgreSQL sets while it loads shared_preload_libraries; reading it
    // from _PG_init, single-threaded, races with nothing.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        extension::budget::init_shared_memory();
    }
    extension::budget::install_metering();
    extension::budget::install_statistics();
    extension::budget::install_barrier();
    extension::install_planner();
    extension::install_units();
    extension::install_citus();
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_exp_mech'"]
    }
}
