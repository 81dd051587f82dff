# Two entry points, both from a fresh Debian 12 checkout:
#   make demo   - install nvct in .venv and run its main job (nvct-cli info + list) against the
#                 real host when it has an NVIDIA driver, else against a freshly built simulated one
#   make test   - install nvct with its test extras in .venv and run every test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: venv demo test lint image checkov deployments

$(BIN)/nvct-cli: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	# nvct-runtime: the native launcher (the shell one where there is no C compiler); neither
	# starts Python for a passthrough call
	# nvct-hook and nvidia-container-runtime-hook (docker --gpus): the native hook, which asks
	# the shim daemon and runs the Python hook when none answers; nvct-cdi-hook (CDI specs'
	# createContainer hook): the native one, which hands what it does not take to Python
	if command -v $${CC:-cc} >/dev/null; then \
		$(BIN)/python -m nvct.runtime.launch.build --native --output $(BIN)/nvct-runtime; \
		$(BIN)/python -m nvct.runtime.launch.build --native --hook --output $(BIN)/nvct-hook; \
		ln -sf nvct-hook $(BIN)/nvidia-container-runtime-hook; \
		$(BIN)/python -m nvct.runtime.launch.build --native --cdi-hook --output $(BIN)/nvct-cdi-hook; \
	else \
		$(BIN)/python -m nvct.runtime.launch.build --output $(BIN)/nvct-runtime; \
	fi
	touch $@

venv: $(BIN)/nvct-cli

demo: venv
	$(BIN)/python -m integration.demo

lint: venv
	$(BIN)/ruff check nvct tests integration bench
	$(BIN)/ruff format --check nvct tests integration bench
	$(BIN)/mypy

test: venv lint
	$(BIN)/pytest -q

# deployments/*.yaml: the Helm chart deployments/helm/nvct rendered with its default values
# (tests/deployments/test_chart.py fails when they differ)
deployments: venv
	$(BIN)/python deployments/render.py

# checkov (tests/deployments/test_security_scan.py) in a virtual environment of its own, cached in
# $$CHECKOV_VENV or ~/.cache/nvct/checkov-VERSION (about 40 s and 290 MB once; the test makes
# it too when it is missing)
checkov: venv
	$(BIN)/python -m tests.deployments.test_security_scan

# nvct's OCI image (Debian 12 minbase + the .deb, no registry): packaging/build/nvct-image.tar,
# imported as nvct:VERSION into the dockerd the docker CLI reaches, when one answers (as root).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' nvct/_version.py)
image:
	$(MAKE) -C packaging deb
	sh packaging/image.sh packaging/build/nvct-image.tar
	if docker info >/dev/null 2>&1; then \
		docker import packaging/build/nvct-image.tar nvct:$(VERSION); \
	else \
		echo "make image: no dockerd answers; import it with: docker import packaging/build/nvct-image.tar nvct:$(VERSION)"; \
	fi

