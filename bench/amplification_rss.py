#!/usr/bin/env python3
"""Server RSS (MiB) through the memory-amplification requests of the hardening issue.

  bench/amplification_rss.py MODEL PAGODA_BINARY PORT

Starts `pagoda serve`, then: a warm-up (n=128), the attack (n=128, 16 stop
strings of 400 KB), 1.5 M stop_token_ids with n=64, one and then three
concurrent 6 MB bodies with n=128 and 16 KiB of stops; prints the status
and VmRSS after each, and 1 s later."""
import json, subprocess, sys, threading, time, urllib.request
model=sys.argv[1]
p=subprocess.Popen([sys.argv[2],'serve','-m',model,'--port',sys.argv[3],'-t','1','--http-threads','8'],stderr=subprocess.PIPE)
time.sleep(2)
def rss():
    for l in open(f'/proc/{p.pid}/status'):
        if l.startswith('VmRSS'): return int(l.split()[1])//1024
def post(body):
    req=urllib.request.Request('http://127.0.0.1:'+sys.argv[3]+'/v1/completions',data=body.encode(),headers={'Content-Type':'application/json'})
    try: return urllib.request.urlopen(req).status
    except urllib.error.HTTPError as e: return e.code
print('start',rss())
print(post(json.dumps({"prompt":"hi","n":128,"max_tokens":4})), 'warm', rss())
print(post(json.dumps({"prompt":"hi","n":128,"max_tokens":4,"stop":["s"*400*1024]*16})), 'attack', rss())
print(post(json.dumps({"prompt":"hi","n":64,"max_tokens":4,"stop_token_ids":[5]*1500000})), 'ids', rss())
big=json.dumps({"prompt":"hi","n":128,"max_tokens":4,"user":"u"*(6<<20),"stop":["s"*1024]*16})
print(post(big),'big1',rss())
ts=[threading.Thread(target=post,args=(big,)) for i in range(3)]
[t.start() for t in ts]; [t.join() for t in ts]
print('big3',rss()); time.sleep(1); print('later',rss())
p.kill()
