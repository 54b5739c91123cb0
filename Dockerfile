# warden's container image on any host with Docker and a reachable registry (Docker Hub or a
# mirror of it) and PyPI: from the repository's root,
#
#   docker build -t warden:local .                                  # warden[checkpoint]
#   docker build -t warden-all:local --build-arg EXTRAS=all .       # warden[all]: driver, toolrunner
#
# Where no registry is reachable, scripts/build-warden-image.sh makes the same image from Debian
# packages (deploy/Dockerfile). Both runtime stages must agree (user, environment, ports, health
# check, entrypoint, command, labels): tests/image/test_dockerfiles.py compares them.
ARG BASE=python:3.11-slim

FROM ${BASE} AS builder
ARG EXTRAS=checkpoint
# tini from Debian, for the runtime stage: its static build is copied there, so the runtime stage
# installs nothing with apt.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/warden
# warden's wheel first, from the sources alone (.dockerignore sends nothing else), then the wheel
# installed with its extras: what is installed is the wheel, as from PyPI, not the source tree.
COPY pyproject.toml README.md /src/
COPY warden/ /src/warden/
COPY checkpoint/ /src/checkpoint/
COPY driver/ /src/driver/
COPY toolrunner/ /src/toolrunner/
RUN python -m pip wheel --no-deps --no-cache-dir --disable-pip-version-check --wheel-dir /build /src \
 && wheel=$(ls /build/warden-*.whl) \
 && /opt/warden/bin/pip install --no-cache-dir --disable-pip-version-check "${wheel}[${EXTRAS}]" \
 && /opt/warden/bin/pip check --disable-pip-version-check \
 && /opt/warden/bin/python -c 'import checkpoint.server.app, warden.healthcheck' \
 && ! find /opt/warden -name '*.so*' -type f -exec ldd {} + 2>/dev/null | grep 'not found' \
 && /opt/warden/bin/pip list --disable-pip-version-check --format=freeze > /opt/warden/installed.txt \
 && /opt/warden/bin/pip uninstall --yes --disable-pip-version-check pip setuptools \
 && rm -f /opt/warden/bin/Activate.ps1
# As in deploy/Dockerfile: the server is imported and ldd reads every native library, so a shared
# library missing from the base fails the build here, not the first start; pip leaves the venv.

FROM ${BASE} AS runtime
ARG VERSION=
LABEL org.opencontainers.image.title=warden \
      org.opencontainers.image.version=${VERSION}
# The base's own pip, setuptools and wheel go too: the runtime holds no Python installer (Debian's
# apt and dpkg, part of the base image, stay; deploy/Dockerfile's base has neither).
RUN python -m pip uninstall --yes --disable-pip-version-check pip setuptools wheel \
 && rm -f /usr/local/bin/pip* /usr/local/bin/idle* \
 && echo 'warden:x:10001:10001:warden:/var/lib/warden:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'warden:x:10001:' >> /etc/group \
 && mkdir -p /var/lib/warden /etc/warden/policies \
 && chown 10001:10001 /var/lib/warden && chmod 0700 /var/lib/warden
COPY --from=builder /usr/bin/tini-static /usr/bin/tini
COPY --from=builder /opt/warden /opt/warden
ENV PATH=/opt/warden/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    WARDEN_HEALTH_ADDRESS=127.0.0.1:7401 \
    WARDEN_DATA=/var/lib/warden \
    WARDEN_POLICIES=/etc/warden/policies
# WARDEN_DATA and WARDEN_POLICIES are every command's --data and --policies (a flag still wins),
# so `docker exec CONTAINER warden audit tail` reads the log the default command writes.
USER 10001:10001
WORKDIR /var/lib/warden
EXPOSE 7401
# The standard gRPC health service (open: no token), asked from inside the container.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/opt/warden/bin/python", "-m", "warden.healthcheck"]
# tini as PID 1: signals reach warden and zombies are reaped.
ENTRYPOINT ["/usr/bin/tini", "--", "warden"]
CMD ["checkpoint", "serve", "--address", "0.0.0.0:7401", "--policies", "/etc/warden/policies", \
     "--data", "/var/lib/warden"]
