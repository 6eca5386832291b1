//! A client of the HTTP API that follows the leader: a write or read sent to a
//! follower is answered with `ForwardToLeader`, and sent again to the leader it names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::BasicNode;
use segstore_raft::kv::{Request, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::api::Dump;

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// Where to send first: the leader last seen.
    pub leader: String,
}

pub type Error = Box<dyn std::error::Error + Send + Sync>;

impl Client {
    pub fn new(addr: &str) -> Client {
        Client {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client"),
            leader: addr.to_string(),
        }
    }

    async fn post<B: Serialize>(&self, addr: &str, path: &str, body: &B) -> Result<Value, Error> {
        let url = format!("http://{addr}{path}");
        Ok(self.http.post(url).json(body).send().await?.json().await?)
    }

    pub async fn get<T: DeserializeOwned>(&self, addr: &str, path: &str) -> Result<T, Error> {
        let url = format!("http://{addr}{path}");
        Ok(self.http.get(url).send().await?.json().await?)
    }

    /// POST to the leader, following `ForwardToLeader` (a few hops at most).
    async fn post_at_leader<B: Serialize>(&mut self, path: &str, body: &B) -> Result<Value, Error> {
        for _ in 0..5 {
            let v = self.post(&self.leader.clone(), path, body).await?;
            if let Some(ok) = v.get("Ok") {
                return Ok(ok.clone());
            }
            let fwd = v.pointer("/Err/APIError/ForwardToLeader/leader_node/addr");
            match fwd.and_then(Value::as_str) {
                Some(addr) => self.leader = addr.to_string(),
                None => return Err(format!("{path}: {v}").into()),
            }
        }
        Err(format!("{path}: no leader after 5 redirects").into())
    }

    pub async fn write(&mut self, req: &Request) -> Result<Response, Error> {
        let v = self.post_at_leader("/write", req).await?;
        Ok(serde_json::from_value(v["data"].clone())?)
    }

    /// A linearizable read at the leader.
    pub async fn read(&mut self, key: &str) -> Result<Option<String>, Error> {
        let v = self.post_at_leader("/read", &key).await?;
        Ok(serde_json::from_value(v)?)
    }

    pub async fn init(&self, addr: &str, nodes: BTreeMap<u64, BasicNode>) -> Result<(), Error> {
        let v = self.post(addr, "/init", &nodes).await?;
        v.get("Ok")
            .map(|_| ())
            .ok_or_else(|| format!("init: {v}").into())
    }

    pub async fn add_learner(&mut self, id: u64, addr: &str) -> Result<(), Error> {
        self.post_at_leader("/add-learner", &(id, addr))
            .await
            .map(|_| ())
    }

    pub async fn change_membership(&mut self, ids: BTreeSet<u64>) -> Result<(), Error> {
        self.post_at_leader("/change-membership", &ids)
            .await
            .map(|_| ())
    }

    pub async fn metrics(&self, addr: &str) -> Result<Value, Error> {
        self.get(addr, "/metrics").await
    }

    pub async fn dump(&self, addr: &str) -> Result<Dump, Error> {
        self.get(addr, "/dump").await
    }
}
