# The two commands (see README.md). Both install what is missing and can be re-run.
.PHONY: demo test bench bench-citus bench-versions bench-profile accuracy

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# Speed against PostgreSQL's own aggregates, OpenDP and diffprivlib (README: Performance).
bench:
	bash scripts/bench.sh

# One server against a Citus cluster of 2 workers, PostgreSQL 18 (README: Scale-out with Citus).
bench-citus:
	bash scripts/bench_citus.sh

# Where the grouped dp_quantile's time goes, by library (README: Performance)
bench-profile:
	bash scripts/bench_profile.sh

# Two builds side by side (README: Performance): make bench-versions OLD=<commit>
bench-versions:
	bash scripts/bench_versions.sh $(OLD)

# Accuracy at equal epsilon against OpenDP and diffprivlib (README: Accuracy).
accuracy:
	bash scripts/accuracy.sh
