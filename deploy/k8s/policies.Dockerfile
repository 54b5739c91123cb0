# Your policy folder as an image (deploy/k8s/driver-with-checkpoint.yaml copies it out at start):
#   docker build -f deploy/k8s/policies.Dockerfile -t warden-policies:local policies/
# The build context is the policy folder itself, so nothing else of the repository is sent.
FROM warden:local
COPY . /etc/warden/policies/
