"""laminar inside RL frameworks.

- `laminar.integrations.verl`: a checkpoint-engine backend for verl, registered under the name
  ``laminar`` when verl is importable (docs/components/verl.md).
- `laminar.integrations.vllm_worker`: ``LaminarWorkerExtension``, vLLM's ``--worker-extension-cls``
  that reloads the weights from a laminar version directory through ``/collective_rpc``
  (docs/reference/vllm.md). It imports nothing of vLLM.

Nothing here is imported by ``import laminar``: an integration imports its framework, and only
a process that runs that framework should pay for it.
"""
