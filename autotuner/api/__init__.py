"""The HTTP service: a FastAPI app (`app`), its routes (`routes`), request-edge dependencies
(`deps`: the bearer token) and typed request/response models (`schemas`). The dashboard is
mounted on the same app (`autotuner.dashboard`).
"""
