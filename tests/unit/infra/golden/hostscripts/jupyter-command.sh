JUPYTER_TOKEN="$(cat /run/secrets/jupyter_token)" exec jupyter lab --ip=0.0.0.0 --port=8888 --no-browser --ServerApp.root_dir=/data
