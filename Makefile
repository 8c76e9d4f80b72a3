# The two commands (see README.md). Both install what is missing and can be re-run.
.PHONY: demo test bench accuracy

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# Speed against PostgreSQL's own aggregates, OpenDP and diffprivlib (README: Performance).
bench:
	bash scripts/bench.sh

# Accuracy at equal epsilon against OpenDP and diffprivlib (README: Accuracy).
accuracy:
	bash scripts/accuracy.sh
