"""The catalog's methods: agents (list, history, propose, review, retire a version), skills and
templates (docs/skills.md), and learnings: reads, and acts recorded before they take effect."""

from __future__ import annotations

import grpc

from checkpoint.server.servicers.handling import Handling
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def handlers(kit: Handling) -> dict[str, grpc.RpcMethodHandler]:
    catalog, entries, learnings, unary = kit.service.catalog, kit.service.entries, kit.service.learnings, kit.unary
    return {
        "ListAgents": unary(catalog.list_agents, pb.ListAgentsRequest, pb.ListAgentsResponse),
        "AgentHistory": unary(catalog.agent_history, pb.AgentHistoryRequest, pb.AgentHistoryResponse),
        "ProposeAgentChange": unary(catalog.propose, pb.ProposeAgentChangeRequest, pb.CatalogActResponse),
        "ReviewAgentChange": unary(catalog.review, pb.ReviewAgentChangeRequest, pb.CatalogActResponse),
        "RetireAgentVersion": unary(catalog.retire, pb.RetireAgentVersionRequest, pb.CatalogActResponse),
        "ListCatalogEntries": unary(entries.list_entries, pb.ListCatalogEntriesRequest,
                                    pb.ListCatalogEntriesResponse),
        "CatalogEntryHistory": unary(entries.history, pb.CatalogEntryHistoryRequest, pb.CatalogEntryHistoryResponse),
        "ProposeCatalogEntry": unary(entries.propose, pb.ProposeCatalogEntryRequest, pb.CatalogEntryActResponse),
        "ReviewCatalogEntry": unary(entries.review, pb.ReviewCatalogEntryRequest, pb.CatalogEntryActResponse),
        "RetireCatalogEntry": unary(entries.retire, pb.RetireCatalogEntryRequest, pb.CatalogEntryActResponse),
        "ProposeLearning": unary(learnings.propose_learning, pb.ProposeLearningRequest, pb.LearningActResponse),
        "ReviewLearning": unary(learnings.review_learning, pb.ReviewLearningRequest, pb.LearningActResponse),
        "ListLearnings": unary(learnings.list_learnings, pb.ListLearningsRequest, pb.ListLearningsResponse),
    }
