//! The public grid: its points, and where a value lies on it.

/// K, the number of grid steps: 2^20 + 1 candidates.
pub const DEFAULT_GRID_SIZE: u32 = 1 << 20;

/// Where a value lies on a grid of K + 1 points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Exactly at grid point j (0..=K).
    At(u32),
    /// Strictly between grid points j and j + 1 (j in 0..K).
    Between(u32),
}

impl Place {
    /// The place's rank among all places: 2j at grid point j, 2j + 1 between j and j + 1.
    pub fn half_cell(self) -> u64 {
        match self {
            Place::At(j) => 2 * j as u64,
            Place::Between(j) => 2 * j as u64 + 1,
        }
    }

    /// The last grid point at or below the place: j for At(j) and for Between(j).
    pub fn point_at_or_below(self) -> u32 {
        match self {
            Place::At(j) | Place::Between(j) => j,
        }
    }

    /// The place of a half cell.
    pub fn of_half_cell(half_cell: u64) -> Self {
        let j = (half_cell / 2) as u32;
        if half_cell.is_multiple_of(2) {
            Place::At(j)
        } else {
            Place::Between(j)
        }
    }
}

/// The public grid of candidates of a float column.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grid {
    pub lo: f64,
    pub hi: f64,
    /// K: grid points 0..=K.
    pub size: u32,
}

impl Grid {
    /// Where a value (clamped to [lo, hi]) lies. NaN must be skipped before.
    pub fn locate(&self, value: f64) -> Place {
        self.locator().locate(value)
    }

    /// The locating rule with its scale computed once, for the per-row path.
    pub fn locator(&self) -> Locator {
        let step = (self.hi - self.lo) / self.size as f64;
        // How far, in steps, the computed offset of a value and the computed grid points
        // can stray from their exact values: each is a few roundings (relative error
        // 2^-53 each) of numbers at most |lo| + |hi| (in units: that over the step) or K.
        let rounding = f64::EPSILON / 2.0;
        let slack = 16.0 * rounding * (self.size as f64 + (self.lo.abs() + self.hi.abs()) / step);
        let points_per_unit = self.size as f64 / (self.hi - self.lo);
        let slack = if slack.is_finite() && slack < 0.25 {
            slack
        } else {
            0.5
        };
        // The fractions, in 2^-32 of a step, that lie more than the slack inside a cell:
        // from floor(slack·2^32) + 1 up to 2^32 − floor(slack·2^32) − 2. None at 0.5
        // (no shortcut): a start past every fraction (u64::MAX: any fraction minus it,
        // wrapping, is at least 1) and an empty span.
        let (inside_from, inside_span) = if slack < 0.5 {
            let margin = (slack * CELL_SCALE) as u64; // below 2^30
            (margin + 1, (1u64 << 32) - (2 * margin + 3))
        } else {
            (u64::MAX, 0)
        };
        Locator {
            grid: *self,
            step,
            points_per_unit,
            slack,
            scaled_points_per_unit: points_per_unit * CELL_SCALE,
            inside_from,
            inside_span,
        }
    }

    /// The value of grid point j: a function of j and the public parameters only, so that
    /// no digit of an answer comes from a data value (Mironov 2012).
    pub fn point(&self, j: u32) -> f64 {
        self.locator().point(j)
    }
}

/// [`Grid::locate`] without a division per value.
#[derive(Debug, Clone, Copy)]
pub struct Locator {
    pub(super) grid: Grid,
    pub(super) step: f64,
    pub(super) points_per_unit: f64,
    /// A bound, in steps, on the rounding of a value's offset and of the grid points
    /// around it (0.5: no shortcut, every value is compared with its points).
    pub(super) slack: f64,
    /// points_per_unit·2^32: the offset in 2^-32 of a step, exactly the offset times
    /// 2^32 (a power of two scales a rounded product exactly), read as an integer.
    scaled_points_per_unit: f64,
    /// Fractions of a step (in 2^-32) from inside_from to inside_from + inside_span lie
    /// more than the slack inside their cell.
    inside_from: u64,
    inside_span: u64,
}

/// 2^32: a cell's fraction as the low half of a 64-bit offset.
const CELL_SCALE: f64 = (1u64 << 32) as f64;

impl Locator {
    /// [`Grid::point`]. (The step first: exact on round grids, such as whole numbers with
    /// K = hi − lo, and never overflowing, since step·j ≤ hi − lo.) The last point is hi
    /// itself: lo + step·K can round below it (0.8999999999999999 for lo 0.2, hi 0.9,
    /// K = 2^20), and a value clamped to hi must lie at a grid point, never beyond the
    /// last one.
    #[inline]
    pub fn point(&self, j: u32) -> f64 {
        if j >= self.grid.size {
            return self.grid.hi;
        }
        (self.grid.lo + self.step * j as f64).clamp(self.grid.lo, self.grid.hi)
    }

    /// The last grid point at or below `value` is j: the place is At(j) if the value
    /// equals it, Between(j) otherwise. The points are computed as [`Locator::point`]
    /// computes answers, so "at" means equal to the candidate an answer would report.
    /// The offset in steps guesses j; rounding can miss by one; where grid points are
    /// closer than the precision of the values (a tiny step far from zero), a binary
    /// search finds it.
    ///
    /// Most values first take a shorter path: the offset in 2^-32 of a step, as one
    /// integer, gives the cell (its high half) and how far inside it the value lies (its
    /// low half) without a clamp or a conversion back to float (issue 22: the per-row
    /// path's longest chain of dependent instructions). It answers only where the full
    /// rule below would find the same cell well inside (within the grid, the fraction
    /// strictly inside the slack); any other value (beyond lo or hi, near a point, an
    /// offset that does not fit) takes the full rule.
    #[inline]
    pub fn locate(&self, value: f64) -> Place {
        match self.well_inside(value) {
            Some(place) => place,
            None => self.locate_fully(value),
        }
    }

    /// The shorter path of [`Locator::locate`]: Some only for a value well inside a cell.
    #[inline(always)]
    pub(super) fn well_inside(&self, value: f64) -> Option<Place> {
        // Truncation toward zero, saturating: an offset below 0 lands at a negative
        // integer (beyond any grid of K < 2^31 as u64; K is at most 2^24) or at 0 (not
        // inside a cell), one beyond i64 (∞ among them) at i64::MAX, beyond every grid;
        // NaN is never located.
        let scaled = ((value - self.grid.lo) * self.scaled_points_per_unit) as i64 as u64;
        let cell = scaled >> 32;
        let inside = scaled & 0xFFFF_FFFF;
        (cell < self.grid.size as u64 && inside.wrapping_sub(self.inside_from) <= self.inside_span)
            .then_some(Place::Between(cell as u32))
    }

    /// [`Locator::locate`] by the full rule.
    #[inline]
    pub(super) fn locate_fully(&self, value: f64) -> Place {
        let value = value.clamp(self.grid.lo, self.grid.hi);
        let size = self.grid.size;
        let offset = (value - self.grid.lo) * self.points_per_unit;
        let guess = (offset as u32).min(size);
        // Well inside a cell (by more than the rounding of the offset and of the points
        // around it), the value lies strictly between points guess and guess + 1, as the
        // comparisons below would find: no point need be computed.
        let inside = offset - guess as f64;
        if inside > self.slack && inside < 1.0 - self.slack && guess < size {
            return Place::Between(guess);
        }
        // The per-row path: the guess is right, two points computed.
        let at_guess = self.point(guess);
        if at_guess <= value {
            if guess == size {
                return Place::At(size); // value = hi
            }
            if value < self.point(guess + 1) {
                return Self::place(guess, at_guess, value);
            }
        }
        self.locate_slowly(value, guess)
    }

    /// The place of `value`, given the last grid point j at or below it.
    #[inline]
    pub(super) fn place(j: u32, point: f64, value: f64) -> Place {
        if point == value {
            Place::At(j)
        } else {
            Place::Between(j)
        }
    }

    /// [`Locator::locate`] where the guess missed: one step either way, or a binary
    /// search for the last grid point at or below the value.
    #[cold]
    pub(super) fn locate_slowly(&self, value: f64, guess: u32) -> Place {
        let size = self.grid.size;
        let last_at_or_below =
            |j: u32| self.point(j) <= value && (j == size || value < self.point(j + 1));
        let j = if guess > 0 && last_at_or_below(guess - 1) {
            guess - 1
        } else if guess < size && last_at_or_below(guess + 1) {
            guess + 1
        } else {
            let (mut low, mut high) = (0u32, size); // point(low) <= value, invariant
            while low < high {
                let middle = low + (high - low).div_ceil(2);
                if self.point(middle) <= value {
                    low = middle;
                } else {
                    high = middle - 1;
                }
            }
            low
        };
        // value < hi = point(K) unless j = K, so Between(j) has j < K.
        debug_assert!(j == size || value < self.point(j + 1));
        Self::place(j, self.point(j), value)
    }
}

/// The public grid of candidates of an integer column: whole numbers lo, lo + step, …,
/// and hi, with step 1 when hi − lo is at most the grid size K, and otherwise the
/// smallest step that keeps the points within K + 1 (the last step may be shorter).
/// Exact in integer arithmetic over the whole bigint range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IntegerGrid {
    pub lo: i64,
    pub hi: i64,
    pub step: u64,
    /// The number of steps: grid points 0..=size.
    pub size: u32,
}

impl IntegerGrid {
    /// The grid from lo to hi (lo < hi) with at most `max_size` steps.
    pub fn new(lo: i64, hi: i64, max_size: u32) -> Self {
        let width = (hi as i128 - lo as i128) as u128;
        let step = width.div_ceil(max_size as u128);
        IntegerGrid {
            lo,
            hi,
            step: step as u64,
            size: width.div_ceil(step) as u32,
        }
    }

    /// Where a value (clamped to [lo, hi]) lies.
    #[inline]
    pub fn locate(&self, value: i64) -> Place {
        let value = value.clamp(self.lo, self.hi);
        if value == self.hi {
            return Place::At(self.size);
        }
        // value − lo in [0, 2^64): exact as a wrapping difference read unsigned.
        let offset = value.wrapping_sub(self.lo) as u64;
        // (<= 1: a division by a variable that may be zero would keep a panic in the
        // unguarded per-row path; a grid's step is at least 1.)
        if self.step <= 1 {
            return Place::At(offset as u32); // whole numbers: every value is a point
        }
        let (j, remainder) = (offset / self.step, offset % self.step);
        if remainder == 0 {
            Place::At(j as u32)
        } else {
            Place::Between(j as u32)
        }
    }

    /// The value of grid point j.
    pub fn point(&self, j: u32) -> i64 {
        if j >= self.size {
            return self.hi;
        }
        (self.lo as i128 + j as i128 * self.step as i128) as i64
    }
}
