"""A NeMo Gym resources server for rollout-telemetry's tests: the weather tool, and masking on demand.

The reward is 1.0 when the model called ``get_weather``, else 0.0. A task whose user prompt contains
``[mask]`` is verified as an infrastructure failure: ``mask_sample=True``, ``failure_kind="judge_failed"``
and a ``failure_reason`` (the reward stays what it was). A prompt with ``[degraded]`` names a failure kind
but stays a valid measurement (``mask_sample=False``): the two fields are orthogonal.
"""

from fastapi import FastAPI
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import BaseModel


class WeatherConfig(BaseResourcesServerConfig):
    pass


class WeatherRequest(BaseModel):
    city: str


class WeatherResponse(BaseModel):
    city: str
    weather_description: str


def _prompt(body: BaseVerifyRequest) -> str:
    items = body.responses_create_params.input
    if isinstance(items, str):
        return items
    return " ".join(
        str(getattr(item, "content", None) or (item.get("content") if isinstance(item, dict) else ""))
        for item in items
    )


class WeatherServer(SimpleResourcesServer):
    ray_enabled = False
    config: WeatherConfig

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/get_weather")(self.get_weather)
        return app

    async def get_weather(self, body: WeatherRequest) -> WeatherResponse:
        return WeatherResponse(city=body.city, weather_description=f"The weather in {body.city} is cold.")

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        called = any(
            item.type == "function_call" and item.name == "get_weather" for item in body.response.output
        )
        prompt = _prompt(body)
        extra: dict = {}
        if "[mask]" in prompt:
            extra = {
                "mask_sample": True,
                "failure_kind": "judge_failed",
                "failure_reason": "the judge timed out",
            }
        elif "[degraded]" in prompt:
            extra = {"failure_kind": "session_lost", "failure_reason": "the session was reset once"}
        return BaseVerifyResponse(**body.model_dump(), reward=float(called), **extra)


if __name__ == "__main__":
    WeatherServer.run_webserver()
