"""A session's phases and the reasons its conditions give, declared once: every status writer takes
these typed values, and callers branch on them, never on a message's words.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """Where a session is. The operator moves it forward only; the last three are final."""

    PENDING = "Pending"
    PLANNING = "Planning"
    ARMED = "Armed"
    CAPTURING = "Capturing"
    COLLECTING = "Collecting"
    ANALYZING = "Analyzing"
    # Hang checks (spec.mode hang-check): watching progress, then diagnosed when stuck.
    WATCHING = "Watching"
    DIAGNOSING = "Diagnosing"
    DIAGNOSED = "Diagnosed"
    SUCCEEDED = "Succeeded"
    PARTIALLY_SUCCEEDED = "PartiallySucceeded"
    FAILED = "Failed"


class Reason(StrEnum):
    """Every reason the operator writes: on the Ready condition (and the other conditions)
    of sessions and schedules, and on the Events it posts. One CamelCase word each, as
    Kubernetes reasons are; the message beside it says the details in words for people."""

    # Waiting to start.
    TARGET_BUSY = "TargetBusy"
    CONCURRENCY_LIMIT = "ConcurrencyLimit"
    NAMESPACE_LIMIT = "NamespaceLimit"
    START_TIMEOUT = "StartTimeout"
    # The target.
    TARGET_NOT_FOUND = "TargetNotFound"
    TARGET_FINISHED = "TargetFinished"
    TARGET_INVALID = "TargetInvalid"
    TOO_MANY_RANKS = "TooManyRanks"
    WAITING_FOR_PODS = "WaitingForPods"
    # Planning the window.
    AGENTS_UNREACHABLE = "AgentsUnreachable"
    WAITING_FOR_STEPS = "WaitingForSteps"
    START_STEP_PASSED = "StartStepPassed"
    WINDOW_PAST_DEADLINE = "WindowPastDeadline"
    PLAN_LOST = "PlanLost"
    # Arming and capturing.
    ARMING = "Arming"
    AGENTS_ARMED = "AgentsArmed"
    NO_AGENT_ARMED = "NoAgentArmed"
    WINDOW_REACHED = "WindowReached"
    WINDOW_MISSED = "WindowMissed"
    REPLANNING = "Replanning"
    REPLANNED = "Replanned"
    # A planned pod is gone, replaced or on the host network: its agent is not called.
    POD_LOST = "PodLost"
    # Collecting and analysing.
    MERGING = "Merging"
    ANALYZED = "Analyzed"
    ANALYSIS_FAILED = "AnalysisFailed"
    ALL_RANKS_CAPTURED = "AllRanksCaptured"
    SOME_RANKS_MISSING = "SomeRanksMissing"
    NO_RANK_CAPTURED = "NoRankCaptured"
    NAMESPACE_OVER_QUOTA = "NamespaceOverQuota"
    # An error no phase expected; the message names its type and text.
    UNEXPECTED_ERROR = "UnexpectedError"
    # The analysis Job (merged trace and report); its failure is a note, not a failed session.
    ANALYSIS_JOB_RUNNING = "AnalysisJobRunning"
    ARTIFACTS_RENDERED = "ArtifactsRendered"
    ANALYSIS_JOB_FAILED = "AnalysisJobFailed"
    ANALYSIS_JOB_TIMED_OUT = "AnalysisJobTimedOut"
    ANALYSIS_JOB_NOT_CREATED = "AnalysisJobNotCreated"
    ANALYSIS_DEADLINE_EXCEEDED = "AnalysisDeadlineExceeded"
    # Repeated windows (spec.window.repeat): one window merged alone, the next one planned.
    WINDOW_JUDGED = "WindowJudged"
    PLANNING_NEXT_WINDOW = "PlanningNextWindow"
    # After the end.
    RETENTION_ENDED = "RetentionEnded"
    ARTIFACTS_EXPIRED = "ArtifactsExpired"
    ARTIFACT_LINKS_ISSUED = "ArtifactLinksIssued"
    # Deleting a session: its finalizer holds while storage fails.
    STORAGE_UNAVAILABLE = "StorageUnavailable"
    # Hang checks.
    WATCHING_PROGRESS = "WatchingProgress"
    WAITING_FOR_FIRST_STEP = "WaitingForFirstStep"
    HANG_DETECTED = "HangDetected"
    HANG_DIAGNOSED = "HangDiagnosed"
    NO_HANG = "NoHang"
    # Schedules.
    SCHEDULED = "Scheduled"
    INVALID_SCHEDULE = "InvalidSchedule"
    SUSPENDED = "Suspended"
    SESSION_CREATED = "SessionCreated"
    REGRESSION = "Regression"
    RECOVERED = "Recovered"
    BASELINE_TOO_SMALL = "BaselineTooSmall"
    MISSED_SCHEDULE = "MissedSchedule"
    TICK_SKIPPED = "TickSkipped"
    SESSION_REPLACED = "SessionReplaced"
