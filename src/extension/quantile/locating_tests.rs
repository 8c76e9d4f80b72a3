//! The row path of each transition symbol places every value where the rule of its kind
//! does, and leaves a rule of another kind (never met: a state is its aggregate's) to the
//! guarded transition.

use super::{Located, Locating, ValueType};
use crate::mechanisms::quantile::{Grid, IntegerGrid, Place};
use pgrx::pg_sys::Datum;

fn place(located: Option<Located>) -> Option<Option<Place>> {
    located.map(|located| match located {
        Located::Place(place) => Some(place),
        Located::NotANumber | Located::Numeric(_) => None,
    })
}

#[test]
fn each_kind_places_as_its_rule_and_refuses_the_others() {
    let float = Grid {
        lo: -3.0,
        hi: 1e6,
        size: 1 << 20,
    }
    .locator();
    let integers = IntegerGrid::new(-40_000, 40_000, 1 << 10);
    let rules = [
        (ValueType::Float, Locating::Float(float)),
        (ValueType::Numeric, Locating::Numeric(float)),
        (ValueType::Smallint, Locating::Smallint(integers)),
        (ValueType::Integer, Locating::Integer(integers)),
        (ValueType::Bigint, Locating::Bigint(integers)),
    ];
    let floats = [
        -1e300,
        -3.0,
        -0.0,
        0.5,
        1234.5678,
        999_999.0,
        1e6,
        f64::INFINITY,
        f64::NAN,
    ];
    let datums: Vec<Datum> = floats
        .iter()
        .map(|v| Datum::from(v.to_bits() as i64))
        .chain([i16::MIN as i64, -1, 0, 7, i16::MAX as i64].map(Datum::from))
        .chain([i32::MIN as i64, -40_001, 39_999, i32::MAX as i64].map(Datum::from))
        .chain([i64::MIN, i64::MAX].map(Datum::from))
        .collect();
    let mut compared = 0;
    for (kind, _) in &rules {
        for (rule_kind, rule) in &rules {
            for &datum in &datums {
                let by_kind = place(rule.by_value_of(*kind, datum));
                if kind != rule_kind || *kind == ValueType::Numeric {
                    assert!(by_kind.is_none(), "{kind:?} took a {rule_kind:?} rule");
                    continue;
                }
                let expected = place(Some(rule.by_value(datum)));
                assert_eq!(by_kind, expected, "{kind:?}, datum {:#x}", datum.value());
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 4 * datums.len());
}
