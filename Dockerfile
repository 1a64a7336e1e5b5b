# sentinel's container image: the `sentinel` console script on a slim Python,
# running as an unprivileged user.
#
#   docker build -t sentinel:0.1.0 .
#
# tests/package/test_image_recipe.py runs the builder stage's steps as written
# here (with the index replaced by a local wheelhouse) where no daemon answers;
# tests/loopback/test_image.py builds the image where one does.
#
# Dependencies are pinned by constraints.txt (every runtime dependency, == a
# version the test suite ran with). The builder turns them into wheels; the
# final stage gets only the installed virtual environment, no compiler and no
# build tools. The image carries only what the sidecar runs: the build context
# holds sentinel/ and the files its wheel needs (LICENSE among them), so neither
# the chaos harness nor the simulated vLLM (sentinel_sim, which `sentinel demo`
# starts) is built into its wheel.

ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY constraints.txt ./
COPY pyproject.toml README.md LICENSE ./
COPY sentinel ./sentinel
# Every dependency ships a binary wheel for this platform; nothing is compiled.
RUN pip wheel --wheel-dir /wheels --constraint constraints.txt . \
 && python -m venv /opt/sentinel \
 && /opt/sentinel/bin/pip install --no-index --find-links /wheels --constraint constraints.txt sentinel-probe \
 && /opt/sentinel/bin/pip uninstall --yes pip \
 && mkdir -p /opt/sentinel/ptrace \
 && cp /opt/sentinel/bin/py-spy /opt/sentinel/ptrace/py-spy

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/sentinel/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The venv keeps its absolute paths, so it lives at the same place in both stages.
COPY --from=builder /opt/sentinel /opt/sentinel
# Two py-spy binaries: /opt/sentinel/bin/py-spy as installed, and a copy in
# /opt/sentinel/ptrace with the file capability cap_sys_ptrace+ep, so that the
# non-root sentinel can attach to the model server's processes. The capability
# is set here, in the final stage, because COPY does not reliably carry extended
# attributes across stages; setcap's package is removed in the same layer.
# The copy is first on PATH only in the stack-dumps variant (manifests/): where
# SYS_PTRACE is not in the container's bounding set, exec of a binary with that
# file capability fails with EPERM, so the default PATH avoids it.
RUN apt-get update \
 && apt-get install --yes --no-install-recommends libcap2-bin \
 && setcap cap_sys_ptrace+ep /opt/sentinel/ptrace/py-spy \
 && getcap /opt/sentinel/ptrace/py-spy \
 && apt-get purge --yes --auto-remove libcap2-bin \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 sentinel \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin sentinel
USER 10001:10001
# HTTP (/livez /readyz /startupz /healthz /status /metrics) and gRPC health.
EXPOSE 8471 8472
ENTRYPOINT ["sentinel"]
CMD ["run"]
