# The trainer image of the real node's tests and demo: the locally made base and a numeric
# non-root user of its own, different from the agent's 65532, so a shared volume is exercised
# between two users. torch is not in it: trainer pods mount the host's virtualenv read-only
# (stepscope_dev.realnode.images.trainer_host_mounts).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
USER 1000:1000
WORKDIR /tmp
ENTRYPOINT ["python"]
