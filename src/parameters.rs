//! Validation of the analyst's parameters: the one place every aggregate checks them.
//!
//! Parameters (epsilon, max_score, ...) are written by the analyst, so rejecting a bad one
//! reveals nothing about the data (../shared/PRIVACY.md, section 6). Data values are never checked
//! here: they are clamped or skipped by the mechanisms instead.

use crate::error::{format_number, Error};

const POSITIVE_FINITE: &str = "finite and greater than 0";

/// The privacy parameter ε of one evaluation.
pub fn epsilon(value: Option<f64>) -> Result<f64, Error> {
    positive_finite("epsilon", value)
}

/// The most one row can add to one item's score (the sensitivity Δ of the scores).
pub fn max_score(value: Option<f64>) -> Result<f64, Error> {
    positive_finite("max_score", value)
}

/// How many items a top-k answer lists.
pub fn k(value: Option<i32>) -> Result<u32, Error> {
    match value {
        Some(k) if k >= 1 => Ok(k as u32),
        _ => Err(Error::InvalidParameter {
            name: "k",
            value: value.map_or("NULL".into(), |k| k.to_string()),
            requirement: "at least 1".into(),
        }),
    }
}

/// The δ of an (ε, δ)-DP mechanism: a probability strictly between 0 and 1.
pub fn delta(value: Option<f64>) -> Result<f64, Error> {
    match value {
        Some(d) if d > 0.0 && d < 1.0 => Ok(d),
        _ => Err(Error::invalid(
            "delta",
            value,
            "greater than 0 and less than 1",
        )),
    }
}

/// How many of the top items compete in the limited-domain mechanism: k̄ ≥ k.
pub fn k_bar(value: Option<i32>, k: u32) -> Result<u32, Error> {
    match value {
        Some(k_bar) if k_bar >= 1 && k_bar as u32 >= k => Ok(k_bar as u32),
        _ => Err(Error::InvalidParameter {
            name: "k_bar",
            value: value.map_or("NULL".into(), |k_bar| k_bar.to_string()),
            requirement: format!("at least k ({k})"),
        }),
    }
}

/// The quantile α: between 0 and 1.
pub fn alpha(value: Option<f64>) -> Result<f64, Error> {
    in_unit_interval("alpha", value)
}

/// Several quantiles: a non-empty array of values between 0 and 1.
pub fn alphas(values: Option<&[Option<f64>]>) -> Result<Vec<f64>, Error> {
    match values {
        None | Some([]) => Err(Error::InvalidParameter {
            name: "alphas",
            value: if values.is_none() { "NULL" } else { "{}" }.into(),
            requirement: "a non-empty array".into(),
        }),
        Some(values) => values
            .iter()
            .map(|&a| in_unit_interval("alphas", a))
            .collect(),
    }
}

fn in_unit_interval(name: &'static str, value: Option<f64>) -> Result<f64, Error> {
    match value {
        Some(a) if (0.0..=1.0).contains(&a) => Ok(a),
        _ => Err(Error::invalid(name, value, "between 0 and 1")),
    }
}

/// The public range [lo, hi] of a quantile: finite, lo < hi, and hi − lo finite.
pub fn bounds(lo: Option<f64>, hi: Option<f64>) -> Result<(f64, f64), Error> {
    let lo = match lo {
        Some(v) if v.is_finite() => v,
        _ => return Err(Error::invalid("lo", lo, "finite")),
    };
    match hi {
        Some(h) if h.is_finite() && h > lo && (h - lo).is_finite() => Ok((lo, h)),
        Some(h) if h.is_finite() && h > lo => Err(Error::invalid(
            "hi",
            hi,
            format!(
                "within the largest finite double of lo ({})",
                format_number(Some(lo))
            ),
        )),
        Some(h) if h.is_finite() => Err(Error::invalid(
            "hi",
            hi,
            format!("greater than lo ({})", format_number(Some(lo))),
        )),
        _ => Err(Error::invalid("hi", hi, "finite")),
    }
}

fn positive_finite(name: &'static str, value: Option<f64>) -> Result<f64, Error> {
    match value {
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(Error::invalid(name, value, POSITIVE_FINITE)),
    }
}

/// The public range [lo, hi] of a quantile over an integer type whose values lie in
/// `range`: lo < hi, both within the type's range (so that every answer is a value of
/// the type).
pub fn integer_bounds(
    lo: Option<i64>,
    hi: Option<i64>,
    type_name: &str,
    range: (i64, i64),
) -> Result<(i64, i64), Error> {
    let within = |name: &'static str, value: Option<i64>| match value {
        Some(v) if (range.0..=range.1).contains(&v) => Ok(v),
        _ => Err(Error::InvalidParameter {
            name,
            value: value.map_or("NULL".into(), |v| v.to_string()),
            requirement: format!("within the range of {type_name}"),
        }),
    };
    let lo = within("lo", lo)?;
    let hi = within("hi", hi)?;
    if hi <= lo {
        return Err(Error::InvalidParameter {
            name: "hi",
            value: hi.to_string(),
            requirement: format!("greater than lo ({lo})"),
        });
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphas_and_bounds() {
        assert_eq!(alpha(Some(0.0)), Ok(0.0));
        assert_eq!(alpha(Some(1.0)), Ok(1.0));
        for bad in [None, Some(-0.1), Some(1.5), Some(f64::NAN)] {
            assert!(alpha(bad)
                .unwrap_err()
                .to_string()
                .starts_with("alpha must be between 0 and 1, got "));
        }
        assert_eq!(
            alphas(Some(&[Some(0.25), Some(0.75)])),
            Ok(vec![0.25, 0.75])
        );
        assert_eq!(
            alphas(None).unwrap_err().to_string(),
            "alphas must be a non-empty array, got NULL"
        );
        assert_eq!(
            alphas(Some(&[])).unwrap_err().to_string(),
            "alphas must be a non-empty array, got {}"
        );
        assert_eq!(
            alphas(Some(&[Some(0.5), None])).unwrap_err().to_string(),
            "alphas must be between 0 and 1, got NULL"
        );
        assert_eq!(bounds(Some(0.0), Some(1e6)), Ok((0.0, 1e6)));
        assert_eq!(
            bounds(Some(5.0), Some(1.0)).unwrap_err().to_string(),
            "hi must be greater than lo (5), got 1"
        );
        assert_eq!(
            bounds(Some(5.0), Some(5.0)).unwrap_err().to_string(),
            "hi must be greater than lo (5), got 5"
        );
        assert_eq!(
            bounds(None, Some(1.0)).unwrap_err().to_string(),
            "lo must be finite, got NULL"
        );
        assert_eq!(
            bounds(Some(f64::NEG_INFINITY), Some(1.0))
                .unwrap_err()
                .to_string(),
            "lo must be finite, got -Infinity"
        );
        assert_eq!(
            bounds(Some(0.0), Some(f64::NAN)).unwrap_err().to_string(),
            "hi must be finite, got NaN"
        );
        assert!(bounds(Some(-1e308), Some(1e308))
            .unwrap_err()
            .to_string()
            .starts_with("hi must be within the largest finite double of lo"));
    }

    #[test]
    fn k_delta_and_k_bar() {
        assert_eq!(k(Some(3)), Ok(3));
        assert_eq!(
            k(Some(0)).unwrap_err().to_string(),
            "k must be at least 1, got 0"
        );
        assert_eq!(
            k(None).unwrap_err().to_string(),
            "k must be at least 1, got NULL"
        );
        assert_eq!(delta(Some(1e-9)), Ok(1e-9));
        for bad in [None, Some(0.0), Some(1.0), Some(-0.1), Some(f64::NAN)] {
            assert!(delta(bad)
                .unwrap_err()
                .to_string()
                .starts_with("delta must be greater than 0 and less than 1, got "));
        }
        assert_eq!(k_bar(Some(5), 5), Ok(5));
        assert_eq!(
            k_bar(Some(4), 5).unwrap_err().to_string(),
            "k_bar must be at least k (5), got 4"
        );
    }

    #[test]
    fn epsilon_must_be_positive_and_finite() {
        assert_eq!(epsilon(Some(0.5)), Ok(0.5));
        assert_eq!(epsilon(Some(1e6)), Ok(1e6));
        for bad in [
            None,
            Some(0.0),
            Some(-1.0),
            Some(f64::NAN),
            Some(f64::INFINITY),
        ] {
            let err = epsilon(bad).unwrap_err();
            assert_eq!(err.sqlstate(), "22023");
            assert!(err
                .to_string()
                .starts_with("epsilon must be finite and greater than 0, got "));
        }
        assert!(max_score(Some(-0.0))
            .unwrap_err()
            .to_string()
            .starts_with("max_score"));
    }
}
