"""The job command: experiments as job stacks on a cluster stack (docs/jobs.md).

    scripts/job submit DIR --name NAME --cluster STACK [--script train.py] [--steps N] ...
    scripts/job list [--refresh]
    scripts/job logs NAME [--node HOST] [--lines N] [--follow]
    scripts/job gpus CLUSTER    # each host: GPUs free now, and which jobs hold the rest
    scripts/job queue CLUSTER [--run | --watch [--every SECONDS]] [--any-revision]
                                # the waiting jobs; one pass (release ended runs, admit,
                                # start) now, or every SECONDS until interrupted; with
                                # --any-revision, jobs submitted from another revision too
    scripts/job resize NAME --nodes N
                                # a running job's node count; it resumes from its checkpoint
    scripts/job stop NAME       # the job's services and launch go; its stack file stays
    scripts/job remove NAME     # stop, then the stack and its stack file go too

A job is a stack of this project with `kind: job` (infra/config/jobs.py): `submit`
writes its stack file `Pulumi.<name>.yaml` (reviewable code, like every stack file)
and runs `pulumi up` on it through the Automation API, printing the engine's progress
as it comes. Submitting again after an edit of the code dir is the code push: the
code's digest changes, the run relaunches on the new code from its newest checkpoint,
and no service and no image is touched. Checkpoints and logs are the job's own:
`/data/checkpoints/<name>`, `/data/logs/<name>`.
"""
