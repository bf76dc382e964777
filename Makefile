# raylift: the two commands are `make demo` (main job on target=local) and `make test`.
.PHONY: setup demo teardown test test-fast bench lock clean

setup:      ## build the pinned control + runtime environments under .cache/ (idempotent)
	bash tools/setup.sh all

demo:       ## set up, then run raylift_deploy on target=local; leaves the endpoint serving
	bash tools/demo.sh

teardown:   ## stop the local cluster started by `make demo`
	bash tools/teardown.sh

test:       ## set up, then run the whole test suite (what .ci/run calls)
	bash tools/test.sh

test-fast:  ## ruff + the unit tier (no process, no socket) in under a minute; builds only the control venv, if missing
	bash tools/test_fast.sh

bench:      ## speed/overhead measurements; results in bench/results/
	bash tools/bench.sh

lock:       ## re-resolve requirements/*.lock from requirements/*.in
	bash tools/lock.sh

clean:      ## remove run state (not the cached environments)
	rm -rf var
