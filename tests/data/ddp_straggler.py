import os, sys, time, torch, torch.distributed as dist
from torch.profiler import profile, schedule, record_function, ProfilerActivity, tensorboard_trace_handler
def main():
    rank=int(os.environ['RANK']); world=int(os.environ['WORLD_SIZE'])
    dist.init_process_group('gloo', rank=rank, world_size=world)
    torch.manual_seed(0); torch.set_num_threads(1)
    model=torch.nn.Sequential(torch.nn.Linear(256,512),torch.nn.ReLU(),torch.nn.Linear(512,256))
    ddp=torch.nn.parallel.DistributedDataParallel(model)
    opt=torch.optim.SGD(ddp.parameters(), lr=0.01)
    x=torch.randn(64,256); y=torch.randn(64,256)
    out=sys.argv[1]; straggle=int(sys.argv[2]); repeat=int(sys.argv[3])
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1,warmup=1,active=3,repeat=repeat),
                 on_trace_ready=tensorboard_trace_handler(out)) as p:
        for step in range(12):
            if rank==1 and straggle:
                with record_function("extra_work"):
                    t=time.time()
                    while time.time()-t<0.04: pass
            loss=((ddp(x)-y)**2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            p.step()
    dist.destroy_process_group()
main()
