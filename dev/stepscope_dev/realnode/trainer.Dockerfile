# The trainer image of the real node's tests and demo: the locally made base and a numeric
# non-root user of its own, different from the agent's 65532, so a shared volume is exercised
# between two users. torch is not in it: trainer pods mount the host's virtualenv and the Python
# it was made with read-only at their host paths (stepscope_dev.realnode.images
# .trainer_host_mounts). On this machine that Python lives under /root/.pyenv, so /root must be
# traversable by the trainer's user (it stays unlistable).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN chmod 0711 /root
USER 1000:1000
WORKDIR /tmp
ENTRYPOINT ["python"]
