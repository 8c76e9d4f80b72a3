//! What a DP aggregate call is charged, read from its arguments as the plan gives them
//! (../shared/PRIVACY.md, section 8): checked before any row, ε and δ must be constants
//! or parameters of the statement, or parameters of a loop, read at each loop's start.

use crate::error::Error;
use crate::extension::aggregate::{Source, State};
use crate::extension::arguments::{evaluate_fixed, is_same_on_every_row, Argument};
use crate::extension::forms::{Aggregate, Family};
use crate::extension::item_scores::ItemScores;
use crate::extension::quantile::QuantileState;
use crate::extension::units::charged_expression;
use crate::parameters;
use pgrx::pg_sys;

/// What the plan says of one call's ε and δ.
pub(super) enum Cost {
    Known {
        epsilon: f64,
        delta: f64,
    },
    /// Set by each loop's outer row: read at the start of each loop.
    PerLoop,
}

/// The arguments a call is charged by: its own, except where the plan gives one group of
/// a unit-bounded aggregate its share of the statement's ε or δ (`dp_unit_share(total,
/// divisor)`, units/rewrite.rs): there the total.
///
/// # Safety
/// As [`evaluate`]'s; `arguments` are the expressions' values.
pub(super) unsafe fn charged_arguments(
    expressions: &[*mut pg_sys::Expr],
    arguments: &[Argument],
    estate: *mut pg_sys::EState,
    running: Option<*mut pg_sys::PlanState>,
) -> Vec<Argument> {
    expressions
        .iter()
        .zip(arguments)
        .map(|(&expression, &argument)| {
            // SAFETY: as the caller guarantees.
            unsafe {
                let charged = charged_expression(expression);
                if charged == expression {
                    argument
                } else {
                    evaluate_fixed(charged, estate, running)
                }
            }
        })
        .chain(arguments.iter().copied().skip(expressions.len()))
        .collect()
}

/// The arguments of a call from its expressions (see [`evaluate_fixed`]).
///
/// # Safety
/// The expressions must be of a plan started in `estate`, and `running` one of its nodes.
pub(super) unsafe fn evaluate(
    expressions: &[*mut pg_sys::Expr],
    estate: *mut pg_sys::EState,
    running: Option<*mut pg_sys::PlanState>,
) -> Vec<Argument> {
    expressions
        .iter()
        // SAFETY: as the caller guarantees.
        .map(|&expression| unsafe { evaluate_fixed(expression, estate, running) })
        .collect()
}

/// What one call is charged, from its arguments as the plan gives them, after checking
/// them (before any row): ε and δ must be constants or parameters of the statement, or
/// parameters of the loop (then read at each loop's start); the other parameters are
/// checked when they are known.
///
/// # Safety
/// `expressions` must be the call's argument expressions (or empty when unknown).
pub(super) unsafe fn cost(
    aggregate: &Aggregate,
    arity: usize,
    arguments: &[Argument],
    expressions: &[*mut pg_sys::Expr],
) -> Result<Cost, Error> {
    let form = aggregate.form(arity);
    // Every parameter is the same on every row of a loop, or the statement is refused
    // before any row: a parameter of the rows would make the answer, or an error
    // ("must be the same on every row"), depend on them.
    let first = form.family.row_arguments().len();
    for (parameter, position) in form.parameters.iter().zip(first..) {
        if let Some(&expression) = expressions.get(position) {
            // SAFETY: one of the call's argument expressions, as the caller guarantees.
            if !unsafe { is_same_on_every_row(expression.cast()) } {
                return Err(of_the_rows(parameter.name()));
            }
        }
    }
    let charged = [Some(form.positions.epsilon), form.positions.delta];
    let unknown = charged
        .into_iter()
        .flatten()
        .filter(|&position| !matches!(arguments.get(position), Some(Argument::Known(_))))
        .collect::<Vec<_>>();
    if unknown.is_empty() {
        return release_of(aggregate, arity, arguments)
            .map(|(epsilon, delta)| Cost::Known { epsilon, delta });
    }
    // Unknown but the same on every row (checked above): read at each loop's start.
    // Unknown with no expression to read (a Finalize Aggregate whose partial call was
    // not found): refused.
    match unknown
        .iter()
        .find(|&&position| expressions.get(position).is_none())
    {
        None => Ok(Cost::PerLoop),
        Some(&position) => Err(of_the_rows(if position == form.positions.epsilon {
            "epsilon"
        } else {
            "delta"
        })),
    }
}

/// The refusal of a parameter computed from the rows.
fn of_the_rows(name: &'static str) -> Error {
    Error::InvalidParameter {
        name,
        value: "an expression of the rows".into(),
        requirement: "a constant or a parameter of the statement".into(),
    }
}

/// ε and δ of one call whose charged parameters are known, after checking every
/// parameter that is.
pub(super) fn release_of(
    aggregate: &Aggregate,
    arity: usize,
    arguments: &[Argument],
) -> Result<(f64, f64), Error> {
    let form = aggregate.form(arity);
    let source = Fixed(arguments);
    let epsilon = parameters::epsilon(source.float(form.positions.epsilon).flatten())?;
    let delta = match form.positions.delta {
        Some(position) => parameters::delta(source.float(position).flatten())?,
        None => 0.0,
    };
    match aggregate.family {
        Family::Selection => ItemScores::validate(form, &source)?,
        Family::Quantile(_) => QuantileState::validate(form, &source)?,
        Family::Partition => {}
    }
    Ok((epsilon, delta))
}

/// Arguments read from the plan.
struct Fixed<'a>(&'a [Argument]);

impl Source for Fixed<'_> {
    fn argument(&self, position: usize) -> Argument {
        self.0.get(position).copied().unwrap_or(Argument::Unknown)
    }
}
