# One image for every a5s role: `a5s gateway`, `a5s worker`, or `a5s up` (embedded).
# (`python -m gateway` and `python -m pipeline` run the same roles.)
FROM python:3.11-slim-bookworm
WORKDIR /app
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY pipeline pipeline
COPY topologies topologies
COPY schemas schemas
COPY stores stores
COPY ops ops
COPY a5s a5s
COPY security security
COPY evaluation evaluation
RUN pip install .
ENV A5S_HOST=0.0.0.0 A5S_DATA_DIR=/data
VOLUME /data
EXPOSE 8000
ENTRYPOINT ["a5s"]
CMD ["gateway"]
