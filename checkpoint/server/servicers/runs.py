"""The methods of a run's life: StartRun, RecordAct (a person's act or the run's end), and what a
run reads of its own: its skills, a skill's text, its lessons."""

from __future__ import annotations

import grpc

from checkpoint.server.servicers.handling import Handling
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def handlers(kit: Handling) -> dict[str, grpc.RpcMethodHandler]:
    service = kit.service
    return {
        "StartRun": kit.unary(service.run_acts.start_run, pb.StartRunRequest, pb.StartRunResponse),
        "RecordAct": kit.unary(service.run_acts.record_act, pb.RecordActRequest, pb.RecordActResponse),
        "RunSkills": kit.unary(service.entries.run_skills, pb.RunSkillsRequest, pb.RunSkillsResponse),
        "LoadSkill": kit.unary(service.entries.load_skill, pb.LoadSkillRequest, pb.LoadSkillResponse),
        "RunLessons": kit.unary(service.learnings.run_lessons, pb.RunLessonsRequest, pb.RunLessonsResponse),
    }
