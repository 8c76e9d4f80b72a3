# The two commands (see README.md). Both install what is missing and can be re-run.
.PHONY: demo test

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh
