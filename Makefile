# gpufleet.llm — developer entry points. Everything generated lives in $(GPUFLEET_LAB_CACHE),
# outside the checkout: ansible-test and galaxy build copy the checkout.
GPUFLEET_LAB_CACHE ?= $(HOME)/.cache/gpufleet-lab
LAB_HOSTS ?= 2
export GPUFLEET_LAB_CACHE LAB_HOSTS

STAGES := bash tests/stages.sh

.PHONY: help demo test setup lint build ee sanity units units-fast lab-tests integration lab-up lab-down lab-status bench clean

help:
	@echo "make demo      bring up the lab and run the collection against it"
	@echo "make test      install everything, then lint, build, sanity, units, lab tests, integration"
	@echo "make units-fast  the unit tests with plain pytest, without the playbook-running ones (no lab)"
	@echo "make lab-up    boot the lab (LAB_HOSTS=$(LAB_HOSTS)); make lab-down removes every trace"
	@echo "make bench     benchmarks; results in bench-results/"

demo:
	@$(STAGES) demo

test:
	@$(STAGES) test

setup:
	@$(STAGES) setup

lint:
	@$(STAGES) lint

build:
	@$(STAGES) build

ee:
	@$(STAGES) ee

sanity:
	@$(STAGES) sanity

units:
	@$(STAGES) units

units-fast:
	@$(STAGES) units-fast

lab-tests:
	@$(STAGES) lab-local

integration:
	@$(STAGES) integration

lab-up:
	@$(STAGES) lab-up

lab-down:
	@$(STAGES) lab-down

lab-status:
	@$(STAGES) lab-status

bench:
	@$(STAGES) bench

clean:
	@$(STAGES) lab-down
	rm -rf build tests/output bench-results
